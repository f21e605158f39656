//! Attachment and listeners: which routes the Gateways' listeners take
//! (namespaces, hostnames, ports), what the statuses say of those they do
//! not, and HTTPS listeners' certificates.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use serde_json::json;
use wasmgate_config::{RouteConfig, Scheme};

use super::{condition, node, parse, route, snapshot};
use crate::model::{Node, Translation};
use crate::route_view::RouteKind;
use crate::translate::translate;

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
