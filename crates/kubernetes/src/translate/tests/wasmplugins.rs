//! WasmPlugins on routes: as filters (per domain, or named by an
//! `ExtensionRef` filter) and as the backends that serve rules themselves.

use std::collections::BTreeMap;

use serde_json::json;
use wasmgate_config::RouteConfig;

use super::{condition, node, parse, route, snapshot};
use crate::translate::translate;

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
