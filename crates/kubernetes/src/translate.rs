//! Gateway API resources to the gateway's own configuration: a pure
//! function of what the API server holds, so it is tested without one.
//! This is the driver; what it reads and makes is `model.rs`.
//!
//! - The GatewayClasses whose `controllerName` is this node's are its own,
//!   and so the Gateways of those classes; their listeners (`listeners.rs`)
//!   say how routes are reached (HTTP or HTTPS) and bring certificates.
//! - Each HTTPRoute and GRPCRoute (one shape: `route_view.rs`) attached
//!   (`parentRefs`) to one of those Gateways, and allowed by a listener of
//!   it (kind, namespaces, hostnames: `attachment.rs`, `hosts.rs`),
//!   becomes routes (`rules.rs`, `rule_filters.rs`): one per match of
//!   each rule, ordered by the Gateway API's precedence (`ranking.rs`),
//!   since the gateway takes the first route that matches.
//! - A rule's `backendRefs` (Services, by port) become one upstream
//!   (`backends.rs`), each Service's share of the traffic its `weight`.
//! - Whatever is not served is said in the status (`status.rs`): the
//!   conditions the Gateway API defines, with their reasons.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kube::ResourceExt;

use crate::attachment::{attach, Attachment, OurGateway};
use crate::backend_tls::TlsPolicies;
use crate::listeners::listeners;
use crate::model::{Condition, ListenerStatus, Node, RouteKey, Snapshot, Translation};
use crate::place::{Place, Used};
use crate::plugins::{Tenancy, WasmPlugins};
use crate::pull_secrets::Pulls;
use crate::ranking::{in_order, Ranked};
use crate::route_view::{RouteView, RuleView};
use crate::rules::route_config;

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
    let mut served: Vec<Ranked> = Vec::new();
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
    out.routes = in_order(served);
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

#[cfg(test)]
mod tests;
