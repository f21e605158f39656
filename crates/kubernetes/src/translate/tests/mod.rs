//! The translation's tests, of `translate` as a whole (a snapshot in, the
//! configuration and statuses out), by what they are about; here the
//! fixtures they share: a node, a snapshot with one Gateway and one
//! Service, routes attached to it.

mod attachment;
mod routes;
mod wasmplugins;

use serde_json::json;

use crate::model::{Node, Snapshot, Translation};
use crate::route_view::RouteKind;

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

fn route(name: &str, hostnames: serde_json::Value, rules: serde_json::Value) -> serde_json::Value {
    json!({"metadata": {"name": name, "namespace": "ns"},
           "spec": {"parentRefs": [{"name": "g"}], "hostnames": hostnames, "rules": rules}})
}
