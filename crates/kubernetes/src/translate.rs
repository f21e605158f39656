//! Gateway API resources to the gateway's own configuration: a pure
//! function of what the API server holds, so it is tested without one.
//!
//! - The GatewayClasses whose `controllerName` is this node's are its own,
//!   and so the Gateways of those classes; their listeners (`listeners.rs`)
//!   say how routes are reached (HTTP or HTTPS) and bring certificates.
//! - Each HTTPRoute and GRPCRoute (one shape: `route_view.rs`) attached
//!   (`parentRefs`) to one of those Gateways, and allowed by a listener of
//!   it (kind, namespaces, hostnames), becomes routes: one per match of
//!   each rule, ordered by the Gateway API's precedence, since the gateway
//!   takes the first route that matches.
//! - A rule's `backendRefs` (Services, by port) become one upstream
//!   (`backends.rs`), each Service's share of the traffic its `weight`.
//! - Whatever is not served is said in the status (`status.rs`): the
//!   conditions the Gateway API defines, with their reasons.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gateway_api::backendtlspolicies::BackendTlsPolicy;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::{
    Gateway, GatewayListenersAllowedRoutesNamespacesFrom,
    GatewayListenersAllowedRoutesNamespacesSelector,
};
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRoute;
use gateway_api::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use wasmgate_config::{
    CertificateConfig, ComponentEndpoint, FixedResponse, FunctionEndpoint, HeaderEdits,
    MirrorConfig, PluginConfig, Redirect, RegistryConfig, ReplacePrefix, Rewrite, RouteConfig,
    Scheme, ServiceConfig, UpstreamConfig,
};

use crate::backend_tls::TlsPolicies;
use crate::backends::backend;
use crate::listeners::{listeners, ListenerState};
use crate::plugins::{RouteContext, Tenancy, WasmBackend, WasmPlugins};
use crate::pull_secrets::Pulls;
use crate::route_view::{BackendRef, RouteKind, RouteView, RuleView};
use crate::wasmplugin::WasmPlugin;

/// What the API server holds, as this node last saw it.
#[derive(Default)]
pub struct Snapshot {
    pub classes: Vec<GatewayClass>,
    pub gateways: Vec<Gateway>,
    pub routes: Vec<HttpRoute>,
    pub grpc_routes: Vec<GrpcRoute>,
    pub services: Vec<Service>,
    pub slices: Vec<EndpointSlice>,
    pub wasmplugins: Vec<WasmPlugin>,
    pub grants: Vec<ReferenceGrant>,
    /// Secrets of type kubernetes.io/tls that listeners name (the node
    /// reads Secrets only by name: `secrets.rs`).
    pub secrets: Vec<Secret>,
    /// For listeners that allow routes from namespaces by label.
    pub namespaces: Vec<Namespace>,
    /// Secrets of type kubernetes.io/dockerconfigjson: WasmPlugins'
    /// `imagePullSecret`s.
    pub pull_secrets: Vec<Secret>,
    pub tls_policies: Vec<BackendTlsPolicy>,
    /// The CAs of BackendTLSPolicies (`ca.crt`), the services' list.
    pub config_maps: Vec<ConfigMap>,
    /// The Secrets the services ConfigMap's services name: passwords.
    pub service_secrets: Vec<Secret>,
    /// Named Secrets the node cannot read (namespace, name), with why.
    pub unreadable_secrets: crate::secrets::Unreadable,
}

impl Snapshot {
    /// Why Secret `namespace/name` is not here: it cannot be read, or
    /// there is no such Secret of type `kind`.
    pub fn missing_secret(&self, namespace: &str, name: &str, kind: &str) -> String {
        crate::secrets::missing(&self.unreadable_secrets, namespace, name, kind)
    }
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
    pub(crate) fn yes(
        kind: &'static str,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Condition {
        Condition {
            kind,
            ok: true,
            reason,
            message: message.into(),
        }
    }

    pub(crate) fn no(
        kind: &'static str,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Condition {
        Condition {
            kind,
            ok: false,
            reason,
            message: message.into(),
        }
    }
}

/// The status of one route toward one of its parents.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteParentStatus {
    pub gateway_namespace: String,
    pub gateway: String,
    pub section_name: Option<String>,
    pub conditions: Vec<Condition>,
}

/// The status of one listener of a Gateway of ours.
#[derive(Clone, Debug, PartialEq)]
pub struct ListenerStatus {
    pub name: String,
    pub attached: i32,
    /// The route kinds it takes (`supportedKinds`).
    pub kinds: Vec<&'static str>,
    pub conditions: Vec<Condition>,
}

/// What the node serves, and what it says about each resource.
#[derive(Default)]
pub struct Translation {
    pub routes: Vec<RouteConfig>,
    pub upstreams: Vec<UpstreamConfig>,
    /// The certificates of the HTTPS listeners.
    pub certificates: Vec<CertificateConfig>,
    /// One per WasmPlugin that is not known broken.
    pub plugins: Vec<PluginConfig>,
    /// The services of the `kubernetes.services` ConfigMap ...
    pub services: Vec<ServiceConfig>,
    /// ... or why they cannot be used (the file's services still are).
    pub services_problem: Option<String>,
    /// WasmPlugins: (namespace, name) -> generation, Accepted, how many
    /// routes it runs on.
    pub plugin_status: BTreeMap<(String, String), (Option<i64>, Condition, i64)>,
    /// GatewayClasses of this controller, by name.
    pub classes: Vec<String>,
    /// Gateways served: (namespace, name) -> their listeners.
    pub gateways: BTreeMap<(String, String), Vec<ListenerStatus>>,
    /// Routes with a parent of ours: (kind, namespace, name) -> generation,
    /// one status per such parent, and the `status.parents` entries of
    /// other controllers, kept as they are (the list is written whole).
    pub route_status: BTreeMap<RouteKey, RouteStatus>,
    /// BackendTLSPolicies that cover a backend of a route of ours:
    /// (namespace, name) -> generation, the Gateways of those routes (its
    /// ancestors), its conditions, other controllers' ancestor entries.
    pub policy_status: BTreeMap<(String, String), PolicyStatus>,
}

/// A BackendTLSPolicy's generation, ancestors, conditions and the
/// ancestors other controllers wrote.
pub type PolicyStatus = (
    Option<i64>,
    BTreeSet<(String, String)>,
    Vec<Condition>,
    Vec<serde_json::Value>,
);

/// A route's kind, namespace and name.
pub type RouteKey = (RouteKind, String, String);

/// A route's generation, our parents' statuses, other controllers'.
pub type RouteStatus = (Option<i64>, Vec<RouteParentStatus>, Vec<serde_json::Value>);

pub(crate) const GROUP: &str = "gateway.networking.k8s.io";

/// A Gateway of ours with its listeners as served.
struct OurGateway<'a> {
    namespace: String,
    name: String,
    listeners: Vec<ListenerState<'a>>,
}

/// What the translation needs to know of the node itself.
#[derive(Clone, Debug, Default)]
pub struct Node {
    /// The GatewayClasses of this `controllerName` are ours.
    pub controller: String,
    /// Gateway listener port -> the node's local port that serves it and
    /// that listener's scheme (`kubernetes.ports`); empty: any port, every
    /// node listener of the Gateway listener's scheme.
    pub ports: BTreeMap<u16, (u16, Scheme)>,
    /// What WasmPlugins' registry pulls start from (`kubernetes.registry`).
    pub registry: Option<RegistryConfig>,
    /// The ConfigMap (namespace, name) that lists services
    /// (`kubernetes.services`).
    pub services: Option<(String, String)>,
    /// What each namespace's WasmPlugins may use (`kubernetes.grants`).
    pub grants: wasmgate_config::grants::NamespaceGrants,
}

/// `broken`: WasmPlugins (by their plugin's name) that did not load on the
/// last try, and why.
pub fn translate(
    node: &Node,
    snapshot: &Snapshot,
    broken: &BTreeMap<String, String>,
) -> Translation {
    let routes: Vec<RouteView> = (snapshot.routes.iter())
        .map(|r| crate::httproute::view(r, &node.controller))
        .chain((snapshot.grpc_routes.iter()).map(|r| crate::grpcroute::view(r, &node.controller)))
        .collect();
    let named: BTreeSet<(String, String)> = (routes.iter())
        .flat_map(|r| {
            (r.rules.iter())
                .flat_map(RuleView::extension_plugins)
                .map(|name| (r.namespace.clone(), name.to_string()))
        })
        .collect();
    let pulls = Pulls {
        defaults: node.registry.as_ref(),
        secrets: &snapshot.pull_secrets,
        unreadable: &snapshot.unreadable_secrets,
    };
    let mut out = Translation::default();
    if let Some((ns, name)) = &node.services {
        let listed = crate::services::services(
            (ns, name),
            &snapshot.config_maps,
            &snapshot.service_secrets,
            &snapshot.unreadable_secrets,
        );
        match listed {
            Ok(services) => out.services = services,
            Err(why) => out.services_problem = Some(why),
        }
    }
    let registry = node.registry.as_ref();
    let tenancy = Tenancy {
        grants: Some(&node.grants),
        own_services: node.services.as_ref().map(|(ns, _)| {
            let names = out.services.iter().map(|s| s.name.clone()).collect();
            (ns.as_str(), names)
        }),
        registry_env: [
            registry.and_then(|r| r.password_env.as_deref()),
            registry.and_then(|r| r.token_env.as_deref()),
        ]
        .into_iter()
        .flatten()
        .collect(),
    };
    let wasmplugins = WasmPlugins::new(&snapshot.wasmplugins, broken, &named, &pulls, &tenancy);
    let tls_policies = TlsPolicies::new(snapshot, &node.controller);
    let mut policy_ancestors: BTreeMap<usize, BTreeSet<(String, String)>> = BTreeMap::new();
    out.classes = (snapshot.classes.iter())
        .filter(|c| c.spec.controller_name == node.controller)
        .map(|c| c.name_any())
        .collect();
    out.plugins = wasmplugins.configs();
    let mut plugin_routes: BTreeMap<String, BTreeSet<RouteKey>> = BTreeMap::new();
    let ours: Vec<OurGateway> = (snapshot.gateways.iter())
        .filter(|g| out.classes.contains(&g.spec.gateway_class_name))
        .map(|g| OurGateway {
            namespace: g.namespace().unwrap_or_default(),
            name: g.name_any(),
            listeners: listeners(g, snapshot, &node.ports, &mut out.certificates),
        })
        .collect();
    let mut attached: HashMap<(String, String, String), i32> = HashMap::new();
    let mut served = Vec::new();
    for route in routes {
        let Some(attachment) = attach(&route, &ours, &snapshot.namespaces, &mut attached) else {
            continue; // no parent of ours: not ours to speak for
        };
        let Attachment {
            mut parents,
            hosts_by_parent,
            accepted_by,
            schemes,
            ports,
        } = attachment;
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
                hosts,
                // Served over one scheme only when every listener that took
                // it is of that scheme.
                scheme: (schemes.len() == 1).then(|| *schemes.iter().next().expect("one")),
                ports: ports.map(|p| p.into_iter().collect()).unwrap_or_default(),
                gateways: &accepted_by,
                plugins: &wasmplugins,
                tls: &tls_policies,
            };
            let used = Used {
                plugins: &mut plugin_routes,
                policies: &mut policy_ancestors,
            };
            Some(route_config(
                &route,
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
        out.route_status.insert(
            (route.kind, route.namespace, route.name),
            (route.generation, parents, route.others_parents),
        );
    }
    for (i, ancestors) in policy_ancestors {
        let p = &tls_policies.states[i];
        out.policy_status.insert(
            (p.namespace.clone(), p.name.clone()),
            (
                p.generation,
                ancestors,
                p.conditions.clone(),
                p.others.clone(),
            ),
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
                format!("loaded as plugin `{plugin}`; runs on {attached} route(s)"),
            ),
        };
        out.plugin_status
            .insert((namespace, name), (generation, condition, attached));
    }
    for gateway in ours {
        let listeners = (gateway.listeners.iter())
            .map(|l| ListenerStatus {
                name: l.spec.name.clone(),
                attached: (attached.get(&(
                    gateway.namespace.clone(),
                    gateway.name.clone(),
                    l.spec.name.clone(),
                )))
                .copied()
                .unwrap_or(0),
                kinds: l.kinds.iter().map(|k| k.name()).collect(),
                conditions: l.conditions.clone(),
            })
            .collect();
        out.gateways
            .insert((gateway.namespace, gateway.name), listeners);
    }
    out
}

/// How a route attaches to the Gateways of ours it names.
struct Attachment {
    /// One status per parent of ours (ResolvedRefs still to add).
    parents: Vec<RouteParentStatus>,
    /// The hosts each accepting parent serves it for (empty: any).
    hosts_by_parent: Vec<Vec<String>>,
    /// (namespace, name) of each Gateway that accepted it.
    accepted_by: Vec<(String, String)>,
    /// The schemes of the listeners that took it.
    schemes: BTreeSet<Scheme>,
    /// The node's local ports of the listeners that took it; None when one
    /// of them is served on any port (no `kubernetes.ports`).
    ports: Option<BTreeSet<u16>>,
}

/// The route's standing with each parent of ours (None: it has none), and
/// the count of routes per listener (`attached`) for those that accept it.
fn attach(
    route: &RouteView,
    ours: &[OurGateway],
    namespaces: &[Namespace],
    attached: &mut HashMap<(String, String, String), i32>,
) -> Option<Attachment> {
    let namespace = &route.namespace;
    let mut out = Attachment {
        parents: Vec::new(),
        hosts_by_parent: Vec::new(),
        accepted_by: Vec::new(),
        schemes: BTreeSet::new(),
        ports: Some(BTreeSet::new()),
    };
    for parent in &route.parents {
        let group = parent.group.as_deref().unwrap_or(GROUP);
        let kind = parent.kind.as_deref().unwrap_or("Gateway");
        let gateway_namespace = parent.namespace.as_deref().unwrap_or(namespace);
        let Some(gateway) = ours.iter().find(|g| {
            group == GROUP
                && kind == "Gateway"
                && g.name == parent.name
                && g.namespace == gateway_namespace
        }) else {
            continue;
        };
        let listeners: Vec<&ListenerState> = (gateway.listeners.iter())
            .filter(|l| (parent.section_name.as_ref()).is_none_or(|s| *s == l.spec.name))
            .filter(|l| parent.port.is_none_or(|p| p == l.spec.port))
            .collect();
        let taking: Vec<&&ListenerState> =
            listeners.iter().filter(|l| l.takes(route.kind)).collect();
        let allowed: Vec<&ListenerState> = (taking.iter())
            .filter(|l| allows_namespace(l, gateway_namespace, namespace, namespaces))
            .map(|l| **l)
            .collect();
        let hosts = route_hosts(&route.hostnames, &allowed);
        let accepted = if listeners.is_empty() {
            Condition::no(
                "Accepted",
                "NoMatchingParent",
                "no listener of the Gateway matches the parentRef's sectionName and port",
            )
        } else if taking.is_empty() {
            Condition::no(
                "Accepted",
                "NotAllowedByListeners",
                format!(
                    "no listener of the Gateway that wasmgate serves takes {}s",
                    route.kind.name()
                ),
            )
        } else if allowed.is_empty() {
            Condition::no(
                "Accepted",
                "NotAllowedByListeners",
                format!("the Gateway's listeners do not allow routes from namespace `{namespace}`"),
            )
        } else if hosts.is_none() {
            Condition::no(
                "Accepted",
                "NoMatchingListenerHostname",
                "none of the route's hostnames matches a listener's hostname",
            )
        } else if let Some(problem) = &route.unsupported {
            Condition::no("Accepted", "UnsupportedValue", problem.clone())
        } else {
            for l in &allowed {
                let key = (
                    gateway.namespace.clone(),
                    gateway.name.clone(),
                    l.spec.name.clone(),
                );
                *attached.entry(key).or_default() += 1;
                out.schemes.extend(l.scheme);
                match (&mut out.ports, l.node_port) {
                    (Some(ports), Some(port)) => {
                        ports.insert(port);
                    }
                    _ => out.ports = None,
                }
            }
            out.hosts_by_parent.push(hosts.unwrap_or_default());
            out.accepted_by
                .push((gateway.namespace.clone(), gateway.name.clone()));
            Condition::yes("Accepted", "Accepted", "served by wasmgate")
        };
        out.parents.push(RouteParentStatus {
            gateway_namespace: gateway.namespace.clone(),
            gateway: parent.name.clone(),
            section_name: parent.section_name.clone(),
            conditions: vec![accepted],
        });
    }
    (!out.parents.is_empty()).then_some(out)
}

fn allows_namespace(
    listener: &ListenerState,
    gateway_ns: &str,
    route_ns: &str,
    namespaces: &[Namespace],
) -> bool {
    let allowed = (listener.spec.allowed_routes.as_ref()).and_then(|a| a.namespaces.as_ref());
    match allowed.and_then(|n| n.from.clone()) {
        Some(GatewayListenersAllowedRoutesNamespacesFrom::All) => true,
        Some(GatewayListenersAllowedRoutesNamespacesFrom::Selector) => {
            let labels = (namespaces.iter())
                .find(|n| n.name_any() == route_ns)
                .map(|n| n.labels().clone())
                .unwrap_or_default();
            (allowed.and_then(|n| n.selector.as_ref()))
                .is_some_and(|selector| selects(selector, &labels))
        }
        Some(GatewayListenersAllowedRoutesNamespacesFrom::Same) | None => gateway_ns == route_ns,
    }
}

/// Whether a label selector (`matchLabels` and `matchExpressions`, all of
/// them) selects an object with `labels`. An empty selector selects
/// everything, as Kubernetes reads it.
fn selects(
    selector: &GatewayListenersAllowedRoutesNamespacesSelector,
    labels: &BTreeMap<String, String>,
) -> bool {
    let by_labels = (selector.match_labels.iter().flatten()).all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = (selector.match_expressions.iter().flatten()).all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false, // an operator Kubernetes does not have selects nothing
        }
    });
    by_labels && by_expressions
}

/// The hosts the route serves under these listeners (empty: any host), or
/// None when its hostnames and the listeners' have nothing in common.
fn route_hosts(route_hosts: &[String], listeners: &[&ListenerState]) -> Option<Vec<String>> {
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

/// A rule's RequestRedirect filter as the gateway's redirect, for a match
/// whose prefix is `prefix` (what ReplacePrefixMatch replaces).
fn redirect(rule: &RuleView, prefix: Option<&str>) -> Option<Redirect> {
    let filter = (rule.filters.iter()).find(|f| f["type"] == "RequestRedirect")?;
    let r = &filter["requestRedirect"];
    Some(Redirect {
        scheme: r["scheme"].as_str().map(str::to_string),
        host: r["hostname"].as_str().map(str::to_string),
        port: r["port"].as_u64().and_then(|p| u16::try_from(p).ok()),
        path: r["path"]["replaceFullPath"].as_str().map(str::to_string),
        replace_prefix: replace_prefix(&r["path"], prefix),
        // The Gateway API's default is 302.
        status: r["statusCode"].as_u64().map_or(302, |c| c as u16),
    })
}

/// A rule's URLRewrite filter as the route's rewrite.
fn rewrite(rule: &RuleView, prefix: Option<&str>) -> Option<Rewrite> {
    let filter = (rule.filters.iter()).find(|f| f["type"] == "URLRewrite")?;
    let r = &filter["urlRewrite"];
    Some(Rewrite {
        path: r["path"]["replaceFullPath"].as_str().map(str::to_string),
        replace_prefix: replace_prefix(&r["path"], prefix),
        host: r["hostname"].as_str().map(str::to_string),
    })
}

/// A rule's RequestMirror filters as mirrors, each to an upstream of its
/// own (`<rule>.mirror<n>`); one whose backend does not resolve is left
/// out and said in `problem`.
fn mirrors(
    route: &RouteView,
    rule: &RuleView,
    base: &str,
    place: &Place,
    snapshot: &Snapshot,
    out: &mut Translation,
    problem: &mut Option<Condition>,
) -> Vec<MirrorConfig> {
    let mut found = Vec::new();
    let filters = (rule.filters.iter()).filter(|f| f["type"] == "RequestMirror");
    for (n, filter) in filters.enumerate() {
        let m = &filter["requestMirror"];
        let target = &m["backendRef"];
        let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
        let backend_ref = BackendRef {
            group: text(&target["group"]),
            kind: text(&target["kind"]),
            name: text(&target["name"]).unwrap_or_default(),
            namespace: text(&target["namespace"]),
            port: target["port"].as_i64().and_then(|p| i32::try_from(p).ok()),
            weight: None,
        };
        // `percent`, or `fraction` (numerator / denominator, default 100).
        let percent = match (m["percent"].as_u64(), m["fraction"]["numerator"].as_u64()) {
            (Some(p), _) => p,
            (None, Some(numerator)) => {
                let denominator = m["fraction"]["denominator"].as_u64().unwrap_or(100).max(1);
                (numerator * 100).div_ceil(denominator)
            }
            (None, None) => 100,
        };
        if percent == 0 {
            continue;
        }
        let resolved = backend(
            route.kind,
            &[backend_ref],
            &route.namespace,
            snapshot,
            place.tls,
        );
        match resolved {
            Ok(b) if b.nodes.is_empty() => {}
            Ok(b) => {
                let name = entry_name(&format!("{base}.mirror{n}"));
                // A mirror whose TLS cannot be used is left out: it never
                // changes what the original gets.
                let Ok(upstream) = b.upstream(name.clone()) else {
                    continue;
                };
                out.upstreams.push(upstream);
                found.push(MirrorConfig {
                    upstream: name,
                    percent: percent.min(100) as u32,
                });
            }
            Err(condition) => {
                problem.get_or_insert(condition);
            }
        }
    }
    found
}

/// A `ReplacePrefixMatch` path modifier: the match's prefix replaced.
fn replace_prefix(path: &serde_json::Value, prefix: Option<&str>) -> Option<ReplacePrefix> {
    let to = path["replacePrefixMatch"].as_str()?;
    Some(ReplacePrefix {
        from: prefix?.to_string(),
        to: to.to_string(),
    })
}

/// A rule's `RequestHeaderModifier` or `ResponseHeaderModifier` (`field`)
/// as the route's header changes.
fn header_edits(rule: &RuleView, field: &str) -> HeaderEdits {
    let mut edits = HeaderEdits::default();
    for filter in &rule.filters {
        let m = &filter[field];
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

/// A route with the key the Gateway API orders matches by: host, path,
/// method, the number of header matches, of query matches, then the oldest
/// route, then by name.
struct Ranked {
    rank: (u8, u8, i64, u8, i64, i64, String, String),
    route: RouteConfig,
}

/// Where a route is served: its hosts (empty: any), its scheme (None:
/// both), the node's ports (empty: any), the Gateways that accepted it and
/// the WasmPlugins that may apply.
struct Place<'a> {
    hosts: Vec<String>,
    scheme: Option<Scheme>,
    ports: Vec<u16>,
    gateways: &'a [(String, String)],
    plugins: &'a WasmPlugins<'a>,
    tls: &'a TlsPolicies,
}

/// What a route's rules use, for the statuses: the routes each plugin
/// runs on, and the Gateways each BackendTLSPolicy (by index) is used by.
struct Used<'a> {
    plugins: &'a mut BTreeMap<String, BTreeSet<RouteKey>>,
    policies: &'a mut BTreeMap<usize, BTreeSet<(String, String)>>,
}

/// The routes and upstream of `route`'s rules (into `out` and `served`), or
/// the ResolvedRefs condition that says what did not resolve (the rules are
/// served all the same: an unresolved backend answers 500, as the Gateway
/// API asks). `used`: the routes each plugin runs on.
fn route_config(
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
                mirrors(route, rule, &base, place, snapshot, out, &mut problem)
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
        let request_headers = header_edits(rule, "requestHeaderModifier");
        let response_headers = header_edits(rule, "responseHeaderModifier");
        for (j, m) in rule.matches.iter().enumerate() {
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
                config.scheme = place.scheme;
                config.ports = place.ports.clone();
                config.path = m.path.clone();
                config.methods = m.methods.clone();
                config.headers = m.headers.clone();
                config.query = m.query.clone();
                config.header_regex = m.header_regex.clone();
                config.query_regex = m.query_regex.clone();
                config.rewrite = rewrite(rule, m.prefix.as_deref());
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
                    Endpoint::Redirect => config.redirect = redirect(rule, m.prefix.as_deref()),
                    Endpoint::Respond(status, why) => {
                        config.respond = Some(FixedResponse {
                            status,
                            body: public_reason(status, &why),
                            headers: BTreeMap::new(),
                        })
                    }
                }
                served.push(Ranked {
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
fn host_variants(route: &RouteView, place: &Place) -> Vec<Vec<String>> {
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
    use wasmgate_config::{PathMatch, UpstreamProtocol};

    fn node(controller: &str) -> Node {
        let everything = wasmgate_config::grants::NamespaceGrant {
            services: Vec::new(),
            files: vec!["/".into()],
        };
        Node {
            controller: controller.into(),
            grants: [("ns".to_string(), everything)].into(),
            ..Node::default()
        }
    }

    /// The first parent's condition `kind` of HTTPRoute `ns/name`.
    fn condition(t: &Translation, name: &str, kind: &str) -> (bool, &'static str) {
        let (_, parents, _) = &t.route_status[&(RouteKind::Http, "ns".into(), name.into())];
        let c = (parents[0].conditions.iter())
            .find(|c| c.kind == kind)
            .unwrap();
        (c.ok, c.reason)
    }

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
            ..Snapshot::default()
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
            let t = translate(&node("me/x"), snap, &BTreeMap::new());
            let (_, parents, _) =
                &t.route_status[&(RouteKind::Http, "ns".to_string(), "r".to_string())];
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
        let t = translate(&node("me/x"), &snap, &BTreeMap::new());
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
        // The plugin broken: its routes answer 500, not saying why (no
        // paths, registries or users for clients); the status says it.
        let broken = BTreeMap::from([("wp.ns.auth".to_string(), "no such file".to_string())]);
        let t = translate(&node("me/x"), &snap, &broken);
        assert!(t.plugins.is_empty());
        let failing = t
            .routes
            .iter()
            .find(|r| r.hosts == ["api.example.com"])
            .unwrap();
        let respond = failing.respond.as_ref().unwrap();
        assert_eq!(respond.status, 500);
        assert!(!respond.body.contains("no such file"), "{}", respond.body);
        assert!(
            respond.body.contains("cannot be served"),
            "{}",
            respond.body
        );
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
        let t = translate(&node("me/x"), &snap, &BTreeMap::new());
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
        let listeners = &t.gateways[&("ns".into(), "g".into())];
        assert_eq!(
            (listeners[0].name.as_str(), listeners[0].attached),
            ("web", 1)
        );
        assert_eq!(
            t.routes[0].scheme,
            Some(Scheme::Http),
            "only HTTP listeners took it"
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
        let t = translate(&node("me/x"), &snapshot(json!([r])), &BTreeMap::new());
        let (_, ours, others) =
            &t.route_status[&(RouteKind::Http, "ns".to_string(), "shared".to_string())];
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
        let t = translate(&node("me/x"), &snap, &BTreeMap::new());
        let reason = |name: &str, kind: &str| condition(&t, name, kind);
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
        assert!(translate(&node("someone/else"), &snap, &BTreeMap::new())
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

    /// A TLS Secret as the API server holds it.
    fn tls_secret(namespace: &str, name: &str, cert: &str, key: &str) -> Secret {
        use base64::Engine;
        let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
        parse(json!({"metadata": {"name": name, "namespace": namespace},
            "type": "kubernetes.io/tls", "data": {"tls.crt": b64(cert), "tls.key": b64(key)}}))
    }

    /// An HTTPS listener serves its Secret's certificate for its hostname
    /// and its routes only over TLS; a listener whose Secret is missing,
    /// broken or in another namespace without a grant says so, and one of
    /// a protocol this node does not serve is refused.
    #[test]
    fn https_listeners_take_certificates_from_secrets() {
        use wasmgate_testkit::pki::{KeyType, Pki};
        let pki = Pki::new("test-ca");
        let issued = pki.server(&["*.example.com"], KeyType::EcdsaP256, 1, 1);
        let other = pki.server(&["other.example.com"], KeyType::EcdsaP256, 2, 1);
        let mut snap = snapshot(json!([route(
            "a",
            json!([]),
            json!([{"backendRefs": [{"name": "s", "port": 80}]}])
        )]));
        snap.gateways = vec![parse(json!({"metadata": {"name": "g", "namespace": "ns"},
            "spec": {"gatewayClassName": "c", "listeners": [
                {"name": "secure", "port": 443, "protocol": "HTTPS", "hostname": "shop.example.com",
                 "tls": {"certificateRefs": [{"name": "shop-tls"}]}},
                {"name": "gone", "port": 8443, "protocol": "HTTPS", "hostname": "gone.example.com",
                 "tls": {"certificateRefs": [{"name": "missing"}]}},
                {"name": "wrong", "port": 9443, "protocol": "HTTPS",
                 "tls": {"certificateRefs": [{"name": "mismatched"}]}},
                {"name": "far", "port": 10443, "protocol": "HTTPS",
                 "tls": {"certificateRefs": [{"name": "far-tls", "namespace": "certs"}]}},
                {"name": "tcp", "port": 5432, "protocol": "TCP"}]}}))];
        snap.secrets = vec![
            tls_secret("ns", "shop-tls", &issued.cert_pem(), &issued.key_pem()),
            tls_secret("ns", "mismatched", &issued.cert_pem(), &other.key_pem()),
            tls_secret("certs", "far-tls", &other.cert_pem(), &other.key_pem()),
        ];
        let listener = |t: &Translation, name: &str| -> Vec<(&'static str, bool, &'static str)> {
            let all = &t.gateways[&("ns".into(), "g".into())];
            let l = all.iter().find(|l| l.name == name).unwrap();
            l.conditions
                .iter()
                .map(|c| (c.kind, c.ok, c.reason))
                .collect()
        };
        let t = translate(&node("me/x"), &snap, &BTreeMap::new());
        assert!(listener(&t, "secure").iter().all(|c| c.1));
        assert!(listener(&t, "gone").contains(&("ResolvedRefs", false, "InvalidCertificateRef")));
        assert!(listener(&t, "gone").contains(&("Programmed", false, "Invalid")));
        assert!(listener(&t, "wrong").contains(&("ResolvedRefs", false, "InvalidCertificateRef")));
        assert!(listener(&t, "far").contains(&("ResolvedRefs", false, "RefNotPermitted")));
        assert!(listener(&t, "tcp").contains(&("Accepted", false, "UnsupportedProtocol")));
        assert_eq!(t.certificates.len(), 1);
        assert_eq!(t.certificates[0].snis, ["shop.example.com"]);
        let routes: Vec<&RouteConfig> = t.routes.iter().collect();
        assert!(
            routes.iter().all(|r| r.scheme == Some(Scheme::Https)),
            "only HTTPS listeners took it"
        );
        // The grant lets the Gateway's namespace read the Secret.
        snap.grants = vec![parse(
            json!({"metadata": {"name": "g", "namespace": "certs"}, "spec": {
            "from": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "ns"}],
            "to": [{"group": "", "kind": "Secret"}]}}),
        )];
        let t = translate(&node("me/x"), &snap, &BTreeMap::new());
        assert!(listener(&t, "far").iter().all(|c| c.1));
        assert_eq!(t.certificates.len(), 2);
        assert!(
            t.certificates[1].snis.is_empty(),
            "no hostname: the certificate's own names"
        );
    }

    /// A GRPCRoute's method matches become paths (exact for service and
    /// method, an expression for the service alone), its backends speak
    /// h2c, and its status is its own.
    #[test]
    fn grpc_routes_match_methods_and_speak_h2c() {
        let mut snap = snapshot(json!([]));
        snap.grpc_routes = vec![parse(
            json!({"metadata": {"name": "echo", "namespace": "ns"},
            "spec": {"parentRefs": [{"name": "g"}], "hostnames": ["grpc.example.com"], "rules": [
                {"matches": [{"method": {"service": "test.Echo"}}],
                 "backendRefs": [{"name": "s", "port": 80}]},
                {"matches": [{"method": {"service": "test.Echo", "method": "Unary"}, "headers": [{"name": "X-Tenant", "value": "a"}]}],
                 "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "x-via", "value": "gw"}]}}],
                 "backendRefs": [{"name": "s", "port": 80}]}]}}),
        )];
        let t = translate(&node("me/x"), &snap, &BTreeMap::new());
        assert_eq!(t.routes.len(), 2);
        assert_eq!(
            t.routes[0].path.exact.as_deref(),
            Some("/test.Echo/Unary"),
            "exact first"
        );
        assert_eq!(t.routes[0].headers["x-tenant"], "a");
        assert_eq!(t.routes[0].request_headers.set["x-via"], "gw");
        assert_eq!(
            t.routes[1].path.regex.as_deref(),
            Some("^/test\\.Echo/[^/]+$")
        );
        assert!(t
            .upstreams
            .iter()
            .all(|u| u.protocol == UpstreamProtocol::H2c));
        let (_, parents, _) = &t.route_status[&(RouteKind::Grpc, "ns".into(), "echo".into())];
        assert!(parents[0].conditions.iter().all(|c| c.ok), "{parents:?}");
        // A filter GRPCRoutes do not have here is said.
        snap.grpc_routes[0].spec.rules.as_mut().unwrap()[0].filters = Some(vec![parse(
            json!({"type": "ExtensionRef", "extensionRef": {"group": "x.io", "kind": "K", "name": "n"}}),
        )]);
        let t = translate(&node("me/x"), &snap, &BTreeMap::new());
        let (_, parents, _) = &t.route_status[&(RouteKind::Grpc, "ns".into(), "echo".into())];
        assert_eq!(parents[0].conditions[0].reason, "UnsupportedValue");
    }

    /// URLRewrite and a redirect's ReplacePrefixMatch replace the prefix
    /// of the match they are under; query parameter matches carry over and
    /// rank after header matches.
    #[test]
    fn rewrites_prefix_replacements_and_query_matches() {
        let snap = snapshot(json!([route(
            "r",
            json!([]),
            json!([
                {"matches": [{"path": {"type": "PathPrefix", "value": "/shop"}}],
                 "filters": [{"type": "URLRewrite", "urlRewrite": {"hostname": "internal.example",
                    "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/store"}}}],
                 "backendRefs": [{"name": "s", "port": 80}]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/old"}}],
                 "filters": [{"type": "RequestRedirect", "requestRedirect": {
                    "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/new"}, "statusCode": 301}}]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/q"}, "queryParams": [{"name": "tier", "value": "gold"}]}],
                 "filters": [{"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "s", "port": 80},
                    "fraction": {"numerator": 1, "denominator": 4}}}],
                 "backendRefs": [{"name": "s", "port": 80}]}
            ])
        )]));
        let t = translate(&node("me/x"), &snap, &BTreeMap::new());
        let (_, parents, _) = &t.route_status[&(RouteKind::Http, "ns".into(), "r".into())];
        assert!(parents[0].conditions.iter().all(|c| c.ok), "{parents:?}");
        let by_name = |suffix: &str| t.routes.iter().find(|r| r.name.ends_with(suffix)).unwrap();
        let shop = by_name("r0.m0");
        let rewrite = shop.rewrite.as_ref().unwrap();
        assert_eq!(rewrite.host.as_deref(), Some("internal.example"));
        let prefix = rewrite.replace_prefix.as_ref().unwrap();
        assert_eq!(
            (prefix.from.as_str(), prefix.to.as_str()),
            ("/shop", "/store")
        );
        let old = by_name("r1.m0").redirect.as_ref().unwrap();
        assert_eq!(old.replace_prefix.as_ref().unwrap().from, "/old");
        assert_eq!(old.status, 301);
        let q = by_name("r2.m0");
        assert_eq!(q.query["tier"], "gold");
        assert_eq!(q.mirror.len(), 1);
        assert_eq!(q.mirror[0].percent, 25);
        let mirror = t
            .upstreams
            .iter()
            .find(|u| u.name == q.mirror[0].upstream)
            .unwrap();
        assert_eq!(mirror.nodes[0].address, "10.0.0.1:8080");
    }

    /// A listener that allows routes by namespace labels takes those of
    /// namespaces its selector selects (labels and expressions).
    #[test]
    fn selector_listeners_take_routes_from_labelled_namespaces() {
        let mut snap = snapshot(json!([]));
        snap.gateways = vec![parse(json!({"metadata": {"name": "g", "namespace": "ns"},
            "spec": {"gatewayClassName": "c", "listeners": [{"name": "web", "port": 80, "protocol": "HTTP",
                "allowedRoutes": {"namespaces": {"from": "Selector", "selector": {
                    "matchLabels": {"team": "shop"},
                    "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "staging"]}]}}}}]}}))];
        let namespace = |name: &str, labels: serde_json::Value| -> Namespace {
            parse(json!({"metadata": {"name": name, "labels": labels}}))
        };
        snap.namespaces = vec![
            namespace("shop", json!({"team": "shop", "env": "prod"})),
            namespace("shop-dev", json!({"team": "shop", "env": "dev"})),
            namespace("other", json!({"team": "other", "env": "prod"})),
        ];
        for ns in ["shop", "shop-dev", "other"] {
            let mut r = route(
                "r",
                json!([]),
                json!([{"backendRefs": [{"name": "s", "port": 80}]}]),
            );
            r["metadata"]["namespace"] = json!(ns);
            r["spec"]["parentRefs"] = json!([{"name": "g", "namespace": "ns"}]);
            snap.routes.push(parse(r));
        }
        let t = translate(&node("me/x"), &snap, &BTreeMap::new());
        let accepted = |ns: &str| {
            let (_, parents, _) = &t.route_status[&(RouteKind::Http, ns.into(), "r".into())];
            (parents[0].conditions[0].ok, parents[0].conditions[0].reason)
        };
        assert_eq!(accepted("shop"), (true, "Accepted"));
        assert_eq!(accepted("shop-dev"), (false, "NotAllowedByListeners"));
        assert_eq!(accepted("other"), (false, "NotAllowedByListeners"));
    }

    /// With `kubernetes.ports`, a route is served only on the node port its
    /// listeners map to; a listener whose port is not mapped, or is mapped
    /// to a listener of the other scheme, is refused (`PortUnavailable`).
    #[test]
    fn listener_ports_map_to_the_nodes_own_ports() {
        let mut snap = snapshot(json!([]));
        snap.gateways = vec![parse(json!({"metadata": {"name": "g", "namespace": "ns"},
            "spec": {"gatewayClassName": "c", "listeners": [
                {"name": "web", "port": 80, "protocol": "HTTP"},
                {"name": "admin", "port": 8080, "protocol": "HTTP"},
                {"name": "odd", "port": 9000, "protocol": "HTTP"},
                {"name": "mixed", "port": 8443, "protocol": "HTTP"}]}}))];
        for (name, section) in [("public", "web"), ("internal", "admin"), ("nowhere", "odd")] {
            let mut r = route(
                name,
                json!([]),
                json!([{"backendRefs": [{"name": "s", "port": 80}]}]),
            );
            r["spec"]["parentRefs"] = json!([{"name": "g", "sectionName": section}]);
            snap.routes.push(parse(r));
        }
        let mut both = route(
            "both",
            json!([]),
            json!([{"backendRefs": [{"name": "s", "port": 80}]}]),
        );
        both["spec"]["parentRefs"] =
            json!([{"name": "g", "sectionName": "web"}, {"name": "g", "sectionName": "admin"}]);
        snap.routes.push(parse(both));
        let mapped = Node {
            ports: BTreeMap::from([
                (80, (18080, Scheme::Http)),
                (8080, (18081, Scheme::Http)),
                (8443, (18443, Scheme::Https)),
            ]),
            ..node("me/x")
        };
        let t = translate(&mapped, &snap, &BTreeMap::new());
        let ports = |name: &str| -> Vec<u16> {
            let r = (t.routes.iter())
                .find(|r| r.name.starts_with(&format!("ns.{name}.")))
                .unwrap();
            r.ports.clone()
        };
        assert_eq!(ports("public"), [18080]);
        assert_eq!(ports("internal"), [18081]);
        assert_eq!(ports("both"), [18080, 18081]);
        assert!(t.routes.iter().all(|r| !r.name.starts_with("ns.nowhere.")));
        let listener = |name: &str| {
            let all = &t.gateways[&("ns".into(), "g".into())];
            let l = all.iter().find(|l| l.name == name).unwrap();
            (l.conditions[0].ok, l.conditions[0].reason)
        };
        assert_eq!(listener("web"), (true, "Accepted"));
        assert_eq!(listener("odd"), (false, "PortUnavailable"));
        assert_eq!(
            listener("mixed"),
            (false, "PortUnavailable"),
            "an HTTP listener on a TLS port"
        );
        let (_, parents, _) = &t.route_status[&(RouteKind::Http, "ns".into(), "nowhere".into())];
        assert_eq!(parents[0].conditions[0].reason, "NotAllowedByListeners");
        // Without a map every listener is served on every node port.
        let t = translate(&node("me/x"), &snap, &BTreeMap::new());
        assert!(t.routes.iter().all(|r| r.ports.is_empty()));
    }

    /// An `ExtensionRef` filter runs a WasmPlugin of the route's namespace
    /// on that rule alone (a WasmPlugin so named no longer covers the whole
    /// namespace by itself); one that does not exist fails the rule with
    /// 500 and says so; another kind is not accepted.
    #[test]
    fn extension_ref_filters_run_the_wasmplugins_they_name() {
        let ext = |name: &str, kind: &str| json!([{"type": "ExtensionRef", "extensionRef": {"group": "wasmgate.io", "kind": kind, "name": name}}]);
        let mut snap = snapshot(json!([
            route(
                "named",
                json!([]),
                json!([
                {"matches": [{"path": {"type": "PathPrefix", "value": "/a"}}], "filters": ext("auth", "WasmPlugin"),
                 "backendRefs": [{"name": "s", "port": 80}]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/b"}}], "backendRefs": [{"name": "s", "port": 80}]}])
            ),
            route(
                "plain",
                json!([]),
                json!([{"backendRefs": [{"name": "s", "port": 80}]}])
            ),
            route(
                "missing",
                json!([]),
                json!([{"filters": ext("gone", "WasmPlugin"), "backendRefs": [{"name": "s", "port": 80}]}])
            ),
            route(
                "other",
                json!([]),
                json!([{"filters": ext("x", "Other"), "backendRefs": [{"name": "s", "port": 80}]}])
            )
        ]));
        snap.wasmplugins = vec![
            parse(
                json!({"metadata": {"name": "auth", "namespace": "ns"}, "spec": {"url": "/p/a.wasm"}}),
            ),
            parse(
                json!({"metadata": {"name": "everywhere", "namespace": "ns"}, "spec": {"url": "/p/e.wasm"}}),
            ),
        ];
        let t = translate(&node("me/x"), &snap, &BTreeMap::new());
        let chain = |prefix: &str| -> Vec<String> {
            let r = (t.routes.iter())
                .find(|r| r.name.starts_with(prefix))
                .unwrap();
            r.plugins.iter().map(|f| f.plugin.clone()).collect()
        };
        assert_eq!(chain("ns.named.r0."), ["wp.ns.auth", "wp.ns.everywhere"]);
        assert_eq!(chain("ns.named.r1."), ["wp.ns.everywhere"]);
        assert_eq!(chain("ns.plain."), ["wp.ns.everywhere"]);
        let missing = (t.routes.iter())
            .find(|r| r.name.starts_with("ns.missing."))
            .unwrap();
        assert_eq!(missing.respond.as_ref().map(|r| r.status), Some(500));
        assert_eq!(
            condition(&t, "missing", "ResolvedRefs"),
            (false, "ExtensionRefNotFound")
        );
        assert_eq!(
            condition(&t, "other", "Accepted"),
            (false, "UnsupportedValue")
        );
        assert_eq!(
            condition(&t, "named", "ResolvedRefs"),
            (true, "ResolvedRefs")
        );
        let (_, auth, attached) = &t.plugin_status[&("ns".into(), "auth".into())];
        assert_eq!((auth.ok, *attached), (true, 1));
    }

    /// `RegularExpression` header and query matches become the route's
    /// expressions (the exact ones stay exact) and count toward precedence.
    #[test]
    fn regular_expression_header_and_query_matches() {
        let snap = snapshot(json!([route(
            "r",
            json!([]),
            json!([
            {"matches": [{"headers": [{"type": "RegularExpression", "name": "X-Tier", "value": "gold|silver"},
                                      {"name": "x-env", "value": "prod"}],
                          "queryParams": [{"type": "RegularExpression", "name": "id", "value": "[0-9]+"}]}],
             "backendRefs": [{"name": "s", "port": 80}]},
            {"backendRefs": [{"name": "s", "port": 80}]}])
        )]));
        let t = translate(&node("me/x"), &snap, &BTreeMap::new());
        let (_, parents, _) = &t.route_status[&(RouteKind::Http, "ns".into(), "r".into())];
        assert!(
            parents[0].conditions.iter().all(|c| c.ok),
            "{:?}",
            parents[0].conditions
        );
        let first = &t.routes[0];
        assert_eq!(
            first.header_regex,
            BTreeMap::from([("x-tier".to_string(), "gold|silver".to_string())])
        );
        assert_eq!(
            first.headers,
            BTreeMap::from([("x-env".to_string(), "prod".to_string())])
        );
        assert_eq!(
            first.query_regex,
            BTreeMap::from([("id".to_string(), "[0-9]+".to_string())])
        );
        assert!(
            t.routes[1].header_regex.is_empty(),
            "the match with more headers goes first"
        );
    }

    /// A WasmPlugin of kind Component or Extism named in `backendRefs`
    /// serves the rule itself (and is never a filter); a filter, a missing
    /// one, or one beside other backends is not a backend.
    #[test]
    fn wasmplugin_backends_serve_rules_themselves() {
        let to = |name: &str| json!([{"backendRefs": [{"group": "wasmgate.io", "kind": "WasmPlugin", "name": name}]}]);
        let mut snap = snapshot(json!([
            route("comp", json!([]), to("handler")),
            route("func", json!([]), to("greeter")),
            route("filter", json!([]), to("auth")),
            route("gone", json!([]), to("nothing")),
            route(
                "mixed",
                json!([]),
                json!([{"backendRefs": [
                {"group": "wasmgate.io", "kind": "WasmPlugin", "name": "handler"}, {"name": "s", "port": 80}]}])
            ),
        ]));
        snap.wasmplugins = vec![
            parse(
                json!({"metadata": {"name": "handler", "namespace": "ns"}, "spec": {"url": "/p/c.wasm", "kind": "Component"}}),
            ),
            parse(
                json!({"metadata": {"name": "greeter", "namespace": "ns"}, "spec": {"url": "/p/e.wasm", "kind": "Extism", "function": "greet"}}),
            ),
            parse(
                json!({"metadata": {"name": "auth", "namespace": "ns"}, "spec": {"url": "/p/a.wasm"}}),
            ),
        ];
        let t = translate(&node("me/x"), &snap, &BTreeMap::new());
        let at = |name: &str| {
            (t.routes.iter())
                .find(|r| r.name.starts_with(&format!("ns.{name}.")))
                .unwrap()
        };
        assert_eq!(
            at("comp").component.as_ref().unwrap().plugin,
            "wp.ns.handler"
        );
        assert_eq!(
            at("comp")
                .plugins
                .iter()
                .map(|f| f.plugin.as_str())
                .collect::<Vec<_>>(),
            ["wp.ns.auth"]
        );
        let function = at("func").function.as_ref().unwrap();
        assert_eq!(
            (function.plugin.as_str(), function.function.as_deref()),
            ("wp.ns.greeter", Some("greet"))
        );
        let resolved = |name: &str| condition(&t, name, "ResolvedRefs");
        assert_eq!(resolved("comp"), (true, "ResolvedRefs"));
        assert_eq!(resolved("filter"), (false, "InvalidKind"));
        assert_eq!(resolved("gone"), (false, "BackendNotFound"));
        assert_eq!(resolved("mixed"), (false, "InvalidKind"));
        for name in ["filter", "gone", "mixed"] {
            assert_eq!(
                at(name).respond.as_ref().map(|r| r.status),
                Some(500),
                "{name}"
            );
        }
        let kinds: BTreeMap<&str, wasmgate_config::PluginKind> = t
            .plugins
            .iter()
            .map(|p| (p.name.as_str(), p.kind))
            .collect();
        assert_eq!(
            kinds["wp.ns.handler"],
            wasmgate_config::PluginKind::Component
        );
        assert_eq!(kinds["wp.ns.greeter"], wasmgate_config::PluginKind::Extism);
        let (_, _, attached) = &t.plugin_status[&("ns".into(), "handler".into())];
        assert_eq!(*attached, 1, "comp runs on it; mixed does not resolve");
    }

    /// A CORS filter becomes the route's `cors`; one whose origins are not
    /// origins is not accepted.
    #[test]
    fn cors_filters_translate_and_bad_ones_are_refused() {
        let cors = |origins: serde_json::Value| {
            json!([{"filters": [{"type": "CORS", "cors": {"allowOrigins": origins, "allowMethods": ["GET", "PUT"],
                "exposeHeaders": ["x-trace"], "maxAge": 600, "allowCredentials": true}}],
                "backendRefs": [{"name": "s", "port": 80}]}])
        };
        let snap = snapshot(json!([
            route("good", json!([]), cors(json!(["https://*.example.com"]))),
            route("bad", json!([]), cors(json!(["app.example.com"]))),
        ]));
        let t = translate(&node("me/x"), &snap, &BTreeMap::new());
        let good = (t.routes.iter())
            .find(|r| r.name.starts_with("ns.good."))
            .unwrap();
        let c = good.cors.as_ref().unwrap();
        assert_eq!(
            (
                c.allow_origins.as_slice(),
                c.allow_methods.len(),
                c.max_age_seconds,
                c.allow_credentials
            ),
            (&["https://*.example.com".to_string()][..], 2, 600, true)
        );
        assert_eq!(
            condition(&t, "bad", "Accepted"),
            (false, "UnsupportedValue")
        );
    }
}
