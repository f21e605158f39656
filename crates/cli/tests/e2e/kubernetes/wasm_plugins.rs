//! Wasm on Kubernetes: WasmPlugins on their routes with per-route and
//! per-domain configuration, one replica writing status; listener ports,
//! extension refs, Wasm backends and image pull secrets.

use super::get_host;
use crate::common::client;
use crate::common::gateway::{send, GatewayProc};
use crate::common::kube::{
    create, interface_ip, plugin_grant, route, route_condition, service, until, until_status,
    Cluster,
};
use crate::common::upstream::Upstream;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use kube::api::DeleteParams;
use kube::Api;
use serde_json::json;
use std::time::{Duration, Instant};
use wasmgate_kubernetes::WasmPlugin;
use wasmgate_testkit::RedisServer;

/// WasmPlugins run on the routes of their Gateway with the configuration
/// their match rules give each route and domain: a Higress-framework filter
/// built from source, unchanged. One that does not load fails only its own
/// routes, and says why in its status. Of two replicas, one writes status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasmplugins_run_on_their_routes_with_per_route_config_and_one_replica_writes_status() {
    let cluster = Cluster::start().await;
    let k = cluster.k.clone();
    let ip = interface_ip();
    let redis = RedisServer::start();
    let app = Upstream::start_on("app", &ip).await;
    service(&k, "app", &[&app]).await;
    for (name, prefix) in [("orders", "/orders"), ("shop", "/shop")] {
        create::<HttpRoute>(&k, route(name, json!([
            {"matches": [{"path": {"type": "PathPrefix", "value": prefix}}], "backendRefs": [{"name": "app", "port": 80}]}
        ])))
        .await;
    }
    let services = format!(
        "services:\n  - {{name: redis, redis: \"{}\"}}\n",
        redis.url()
    );
    let granted = format!(", grants: {{default: {}}}", plugin_grant(&["redis"]));
    let kubeconfig = cluster.dir.path().join("kubeconfig");
    let mut first = cluster.node_as(&kubeconfig, &granted, &services);
    let c = client();
    until_status(&c, &first, "/shop", 200).await;

    let redis_conf = json!({"service_name": "redis.dns"});
    create::<WasmPlugin>(&k, json!({
        "apiVersion": "wasmgate.io/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": "rules"},
        "spec": {
            "url": format!("file://{}", crate::common::plugin("higress_rules_counter").display()),
            "services": ["redis"],
            "defaultConfig": {"redis": redis_conf, "tag": "default"},
            "matchRules": [
                {"route": ["orders"], "config": {"redis": redis_conf, "tag": "orders-route"}},
                {"domain": ["api.example.com"], "config": {"redis": redis_conf, "tag": "api-domain"}},
                {"domain": ["quiet.example.com"], "configDisable": true}
            ]
        }
    }))
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while get_host(&c, &first, "/shop", "x")
        .await
        .header("x-rule-tag")
        .unwrap_or_default()
        != "default"
    {
        assert!(
            Instant::now() < deadline,
            "the WasmPlugin never ran on /shop"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let orders = get_host(&c, &first, "/orders/1", "x").await;
    assert_eq!(
        (
            orders.status,
            orders.header("x-rule-tag").unwrap_or_default()
        ),
        (200, "orders-route")
    );
    // The count is per host, in Redis: the filter reached it.
    let count: u32 = orders
        .header("x-rule-count")
        .unwrap_or_default()
        .parse()
        .unwrap_or(0);
    assert!(count >= 1, "{:?}", orders.headers);
    let api = get_host(&c, &first, "/shop", "api.example.com").await;
    assert_eq!(api.header("x-rule-tag").unwrap_or_default(), "api-domain");
    let quiet = get_host(&c, &first, "/shop", "quiet.example.com").await;
    assert_eq!(
        (quiet.status, quiet.header("x-rule-tag").unwrap_or_default()),
        (200, "")
    );
    let plugins: Api<WasmPlugin> = Api::default_namespaced(k.clone());
    until("the WasmPlugin's status says where it runs", || async {
        let p = serde_json::to_value(plugins.get("rules").await.unwrap()).unwrap();
        p["status"]["attachedRoutes"] == 2 && p["status"]["conditions"][0]["status"] == "True"
    })
    .await;

    // A plugin that does not load: only the route it targets fails (500,
    // FAIL_CLOSE), its status says why, the rest is served and changes go on.
    create::<WasmPlugin>(
        &k,
        json!({
            "apiVersion": "wasmgate.io/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": "missing"},
            "spec": {"url": "file:///nonexistent/plugin.wasm", "phase": "AUTHN",
                     "targetRefs": [{"kind": "HTTPRoute", "name": "shop"}]}
        }),
    )
    .await;
    let failing = until_status(&c, &first, "/shop", 500).await;
    assert!(
        !failing.text().contains("nonexistent"),
        "the client is told where the plugin should have come from: {}",
        failing.text()
    );
    let orders = get_host(&c, &first, "/orders/2", "x").await;
    assert_eq!(
        (
            orders.status,
            orders.header("x-rule-tag").unwrap_or_default()
        ),
        (200, "orders-route")
    );
    until("the broken WasmPlugin's status says why", || async {
        let p = serde_json::to_value(plugins.get("missing").await.unwrap()).unwrap();
        let condition = &p["status"]["conditions"][0];
        condition["status"] == "False"
            && condition["message"]
                .as_str()
                .is_some_and(|m| m.contains("/nonexistent/plugin.wasm"))
    })
    .await;
    plugins
        .delete("missing", &DeleteParams::default())
        .await
        .unwrap();
    until_status(&c, &first, "/shop", 200).await;

    // A second replica serves the same routes; exactly one writes status,
    // and when it stops the other takes over.
    let second = cluster.node_as(&kubeconfig, &granted, &services);
    let api = get_host(&c, &second, "/shop", "api.example.com");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut reply = api.await;
    while reply.header("x-rule-tag").unwrap_or_default() != "api-domain" {
        assert!(
            Instant::now() < deadline,
            "the second replica never served the plugin"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
        reply = get_host(&c, &second, "/shop", "api.example.com").await;
    }
    let writer = |gw: &GatewayProc| {
        let (c, url) = (c.clone(), gw.admin_url("/status"));
        async move {
            let status = send(&c, "GET", &url, &[], "").await.json();
            status["config"]["kubernetes"]["status_writer"] == true
        }
    };
    until("one replica holds the Lease", || async {
        writer(&first).await != writer(&second).await
    })
    .await;
    assert!(writer(&first).await, "the first replica started first");
    first.terminate();
    until("the second replica takes the Lease", || async {
        writer(&second).await
    })
    .await;
    create::<HttpRoute>(&k, route("late", json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/late"}}], "backendRefs": [{"name": "app", "port": 80}]}
    ])))
    .await;
    until_status(&c, &second, "/late", 200).await;
    assert_eq!(
        route_condition(&k, "late", "Accepted").await["status"],
        "True"
    );
}

/// Gateway listener ports map to the node's own listeners
/// (`kubernetes.ports`): each route answers only on the node port of the
/// listener it attached to, and an unmapped port is refused in the
/// listener's status. WasmPlugins of kind Component and Extism named in
/// `backendRefs` serve their rules. An `ExtensionRef` filter runs a
/// WasmPlugin on its rule alone; that WasmPlugin's module comes from a private registry (TLS
/// with a private CA, htpasswd) with the credentials of its
/// `imagePullSecret`, and waits for that Secret if it is not there yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_ports_extension_refs_wasm_backends_and_pull_secrets() {
    use k8s_openapi::api::core::v1::Secret;
    use wasmgate_testkit::pki::{KeyType, Pki};
    use wasmgate_testkit::{RegistryAuth, RegistryOptions, RegistryServer};

    // A port map names the node's own listeners.
    let refused = crate::common::check_refuses(
        "listen: 127.0.0.1:18080\nconfig: {kubernetes: {ports: {80: 18081}}}\n",
    );
    assert!(
        refused.contains("config.kubernetes.ports.80")
            && refused.contains("no listener on port 18081"),
        "{refused}"
    );

    let cluster = Cluster::start().await;
    let k = cluster.k.clone();
    let app = Upstream::start_on("app", &interface_ip()).await;
    service(&k, "app", &[&app]).await;
    let pki = Pki::new("registry CA");
    let registry = RegistryServer::start_with(RegistryOptions {
        auth: RegistryAuth::Htpasswd {
            user: "ci".into(),
            password: "s3cret-pass".into(),
        },
        tls: Some((
            pki.server(&["IP:127.0.0.1"], KeyType::EcdsaP256, 2, 1),
            pki.ca.clone(),
        )),
    });
    let host = registry.host();
    registry.push_higress_image(
        "filters/add-header:1",
        &crate::common::plugin("add_header"),
        "f",
    );

    create::<Gateway>(
        &k,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "ports"},
            "spec": {"gatewayClassName": "wasmgate", "listeners": [
                {"name": "web", "port": 80, "protocol": "HTTP"},
                {"name": "internal", "port": 8080, "protocol": "HTTP"},
                {"name": "odd", "port": 9000, "protocol": "HTTP"}]}
        }),
    )
    .await;
    let extension = json!([{"type": "ExtensionRef",
        "extensionRef": {"group": "wasmgate.io", "kind": "WasmPlugin", "name": "private"}}]);
    let app_backend = json!([{"name": "app", "port": 80}]);
    let wasm_backend =
        |name: &str| json!([{"group": "wasmgate.io", "kind": "WasmPlugin", "name": name}]);
    for (name, section, filters, backends) in [
        (
            "public",
            "web",
            json!([{"type": "CORS", "cors": {"allowOrigins": ["https://*.example.com"], "allowMethods": ["PUT"]}}]),
            app_backend.clone(),
        ),
        ("internal", "internal", json!([]), app_backend.clone()),
        ("filtered", "web", extension, app_backend),
        // The component answers `/`: the rule's prefix is rewritten away.
        (
            "component",
            "web",
            json!([{"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}]),
            wasm_backend("handler"),
        ),
        ("function", "web", json!([]), wasm_backend("greeter")),
    ] {
        let mut r = route(
            name,
            json!([{"matches": [{"path": {"type": "PathPrefix", "value": format!("/{name}")}}],
                    "filters": filters, "backendRefs": backends}]),
        );
        r["spec"]["parentRefs"] = json!([{"name": "ports", "sectionName": section}]);
        create::<HttpRoute>(&k, r).await;
    }
    create::<WasmPlugin>(
        &k,
        json!({
            "apiVersion": "wasmgate.io/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": "private"},
            "spec": {"url": format!("oci://{host}/filters/add-header:1"), "imagePullSecret": "regcred",
                     "defaultConfig": {"from": "the registry"}}
        }),
    )
    .await;

    // Modules that serve a rule themselves: a `wasi:http` component and an
    // Extism function.
    for (name, kind, module, function) in [
        ("handler", "Component", "component_rust", None),
        ("greeter", "Extism", "hello", Some("hello")),
    ] {
        create::<WasmPlugin>(
            &k,
            json!({
                "apiVersion": "wasmgate.io/v1alpha1", "kind": "WasmPlugin",
                "metadata": {"name": name},
                "spec": {"url": format!("file://{}", crate::common::plugin(module).display()),
                         "kind": kind, "function": function}
            }),
        )
        .await;
    }

    let (web, internal) = (crate::common::free_port(), crate::common::free_port());
    let gw = cluster.node_as(
        &cluster.dir.path().join("kubeconfig"),
        &format!(
            ", ports: {{80: {web}, 8080: {internal}}}, registry: {{ca_file: \"{}\"}}",
            pki.ca.display()
        ),
        &format!(
            "listeners: [{{address: \"127.0.0.1:{web}\"}}, {{address: \"127.0.0.1:{internal}\"}}]\n"
        ),
    );
    let c = client();
    let get = |port: u16, path: &'static str| {
        let c = c.clone();
        async move {
            send(
                &c,
                "GET",
                &format!("http://127.0.0.1:{port}{path}"),
                &[],
                "",
            )
            .await
        }
    };
    until(
        "the public route is served on the web listener's port",
        || async { get(web, "/public").await.status == 200 },
    )
    .await;
    assert_eq!(get(internal, "/public").await.status, 404);
    // The route's CORS filter: a preflight answered by the node.
    let url = format!("http://127.0.0.1:{web}/public");
    let origin = [
        ("origin", "https://app.example.com"),
        ("access-control-request-method", "PUT"),
    ];
    let preflight = send(&c, "OPTIONS", &url, &origin, "").await;
    assert_eq!(
        (
            preflight.status,
            preflight
                .header("access-control-allow-methods")
                .unwrap_or_default()
        ),
        (204, "PUT")
    );
    assert_eq!(get(internal, "/internal").await.status, 200);
    assert_eq!(get(web, "/internal").await.status, 404);
    assert_eq!(
        get(gw.port, "/public").await.status,
        404,
        "no Gateway port maps to `listen`"
    );
    let component = get(web, "/component").await;
    assert_eq!(
        (component.status, component.text()),
        (200, "hello from rust component".to_string())
    );
    let url = format!("http://127.0.0.1:{web}/function/x");
    let function = send(&c, "POST", &url, &[], "k8s").await;
    assert_eq!(function.text(), r#"{"message":"Hello k8s"}"#);
    let gateways: Api<Gateway> = Api::default_namespaced(k.clone());
    until("the unmapped listener says PortUnavailable", || async {
        let g = serde_json::to_value(gateways.get("ports").await.unwrap()).unwrap();
        let odd = (g["status"]["listeners"]
            .as_array()
            .cloned()
            .unwrap_or_default())
        .into_iter()
        .find(|l| l["name"] == "odd");
        odd.is_some_and(|l| {
            l["conditions"][0]["reason"] == "PortUnavailable" && l["attachedRoutes"] == 0
        })
    })
    .await;

    // The pull Secret is not there yet: the rule that names the plugin
    // fails closed, saying why; the others are served without it.
    until(
        "the rule naming the unpullable plugin answers 500",
        || async { get(web, "/filtered").await.status == 500 },
    )
    .await;
    let plugins: Api<WasmPlugin> = Api::default_namespaced(k.clone());
    let accepted = || async {
        let p = serde_json::to_value(plugins.get("private").await.unwrap()).unwrap();
        p["status"]["conditions"][0].clone()
    };
    until(
        "the WasmPlugin's status names the missing Secret",
        || async {
            let c = accepted().await;
            c["status"] == "False" && c["message"].as_str().is_some_and(|m| m.contains("regcred"))
        },
    )
    .await;
    let public = get(web, "/public").await;
    assert_eq!(
        (
            public.status,
            public.header("x-seen-path").unwrap_or_default()
        ),
        (200, "")
    );

    create::<Secret>(
        &k,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "regcred"},
               "type": "kubernetes.io/dockerconfigjson",
               "stringData": {".dockerconfigjson": json!({"auths": {&host: {"username": "ci", "password": "s3cret-pass"}}}).to_string()}}),
    )
    .await;
    until(
        "the plugin, pulled with the Secret's credentials, runs on its rule",
        || async {
            get(web, "/filtered/x")
                .await
                .header("x-seen-path")
                .unwrap_or_default()
                == "/filtered/x"
        },
    )
    .await;
    let public = get(web, "/public").await;
    assert_eq!(
        (
            public.status,
            public.header("x-seen-path").unwrap_or_default()
        ),
        (200, ""),
        "a WasmPlugin an ExtensionRef names runs only there"
    );
    until(
        "the WasmPlugin's status says it runs on one route",
        || async {
            let p = serde_json::to_value(plugins.get("private").await.unwrap()).unwrap();
            p["status"]["conditions"][0]["status"] == "True" && p["status"]["attachedRoutes"] == 1
        },
    )
    .await;
    assert!(
        !gw.logs().contains("s3cret-pass"),
        "the password is never logged"
    );
}
