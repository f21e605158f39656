//! How a route attaches to the Gateways of ours: its `parentRefs` against
//! the Gateways' listeners (`sectionName`, `port`), each listener's
//! `allowedRoutes` (kinds, namespaces: the same, all, or by label) and
//! hostnames. It gives the route's `Accepted` condition toward each parent
//! and, for those that accept it, where it is served.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gateway_api::gateways::{
    GatewayListenersAllowedRoutesNamespacesFrom, GatewayListenersAllowedRoutesNamespacesSelector,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use wasmgate_config::Scheme;

use crate::hosts::route_hosts;
use crate::listeners::ListenerState;
use crate::model::{Condition, RouteParentStatus, GROUP};
use crate::route_view::RouteView;

/// A Gateway of ours with its listeners as served.
pub(crate) struct OurGateway<'a> {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) listeners: Vec<ListenerState<'a>>,
}

/// How a route attaches to the Gateways of ours it names.
pub(crate) struct Attachment {
    /// One status per parent of ours (ResolvedRefs still to add).
    pub(crate) parents: Vec<RouteParentStatus>,
    /// The hosts each accepting parent serves it for (empty: any).
    pub(crate) hosts_by_parent: Vec<Vec<String>>,
    /// (namespace, name) of each Gateway that accepted it.
    pub(crate) accepted_by: Vec<(String, String)>,
    /// The schemes of the listeners that took it.
    pub(crate) schemes: BTreeSet<Scheme>,
    /// The node's local ports of the listeners that took it; None when one
    /// of them is served on any port (no `kubernetes.ports`).
    pub(crate) ports: Option<BTreeSet<u16>>,
}

/// The route's standing with each parent of ours (None: it has none), and
/// the count of routes per listener (`attached`) for those that accept it.
pub(crate) fn attach(
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
