//! Rules to routes: backends and their endpoints, matches and their
//! order, GRPCRoutes, and the filters (rewrites, redirects, mirrors,
//! header changes, CORS).

use std::collections::BTreeMap;

use gateway_api::referencegrants::ReferenceGrant;
use serde_json::json;
use wasmgate_config::{PathMatch, Scheme, UpstreamProtocol};

use super::{condition, node, parse, route, snapshot};
use crate::model::Snapshot;
use crate::route_view::RouteKind;
use crate::translate::translate;

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
