//! A wasmgate node following a real Kubernetes API server (docs/kubernetes.md):
//! kube-apiserver v1.34.2 built from source on an etcd of its own, the
//! Gateway API v1.5.1 CRDs installed, resources created through the API as
//! `kubectl apply` would, and real HTTP through the node to upstream
//! processes that Services' EndpointSlices point at. Routes appear, split
//! by weight, answer 500 for a missing backend and go away; statuses say
//! why; the API server killed under load fails no request. WasmPlugins
//! (a Higress-framework filter built from source) run on their routes with
//! per-route and per-domain configuration; one that does not load fails
//! only its own routes; two replicas agree on one status writer. The API
//! server restarted: the watches say so in /status and come back at once.

use std::time::{Duration, Instant};

use crate::common::gateway::{admin, send, GatewayProc};
use crate::common::kube::{
    create, create_from_file, interface_ip, listener_condition, plugin_grant, route,
    route_condition, secure_gateway, service, tls_secret, until, until_status, Cluster,
};
use crate::common::upstream::Upstream;
use crate::common::{client, HttpClient};
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use kube::api::DeleteParams;
use kube::Api;
use serde_json::{json, Value};
use wasmgate_kubernetes::WasmPlugin;
use wasmgate_testkit::RedisServer;

/// The node serves the routes of its GatewayClass's Gateway, weighted,
/// with statuses that say what is and is not served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_api_routes_are_served_weighted_and_explained_in_their_status() {
    let mut cluster = Cluster::start().await;
    let k = cluster.k.clone();
    let ip = interface_ip();
    let (a, b) = (
        Upstream::start_on("a", &ip).await,
        Upstream::start_on("b", &ip).await,
    );
    service(&k, "app", &[&a]).await;
    service(&k, "beta", &[&b]).await;
    let gw = cluster.node("");
    let c = client();

    // A route to one Service, and one split evenly between two.
    create::<HttpRoute>(&k, route("app", json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/app"}}], "backendRefs": [{"name": "app", "port": 80}]},
        {"matches": [{"path": {"type": "PathPrefix", "value": "/split"}}],
         "backendRefs": [{"name": "app", "port": 80, "weight": 1}, {"name": "beta", "port": 80, "weight": 1}]}
    ])))
    .await;
    let reply = until_status(&c, &gw, "/app/x", 200).await;
    assert_eq!(reply.json()["upstream"], "a", "{}", reply.text());
    // A prefix matches whole segments.
    assert_eq!(send(&c, "GET", &gw.url("/apps"), &[], "").await.status, 404);
    let (before_a, before_b) = (a.hits(), b.hits());
    for _ in 0..200 {
        assert_eq!(
            send(&c, "GET", &gw.url("/split"), &[], "").await.status,
            200
        );
    }
    let (to_a, to_b) = (a.hits() - before_a, b.hits() - before_b);
    assert_eq!(to_a + to_b, 200);
    assert!((60..=140).contains(&to_a), "weights 1:1 gave {to_a}:{to_b}");
    let accepted = route_condition(&k, "app", "Accepted").await;
    assert_eq!(accepted["status"], "True", "{accepted}");
    assert_eq!(
        route_condition(&k, "app", "ResolvedRefs").await["status"],
        "True"
    );
    let gateways: Api<Gateway> = Api::default_namespaced(k.clone());
    until("the Gateway's status counts the route", || async {
        let g = serde_json::to_value(gateways.get("edge").await.unwrap()).unwrap();
        g["status"]["listeners"][0]["attachedRoutes"] == 1
            && g["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|x| x["type"] == "Programmed" && x["status"] == "True")
            })
    })
    .await;
    let classes: Api<GatewayClass> = Api::all(k.clone());
    let class = serde_json::to_value(classes.get("wasmgate").await.unwrap()).unwrap();
    assert_eq!(
        class["status"]["conditions"][0]["status"], "True",
        "{class}"
    );

    // A backend that does not exist: 500 and ResolvedRefs=False with the reason.
    create::<HttpRoute>(&k, route("missing", json!([
        {"matches": [{"path": {"type": "Exact", "value": "/missing"}}], "backendRefs": [{"name": "nowhere", "port": 80}]}
    ])))
    .await;
    until_status(&c, &gw, "/missing", 500).await;
    let resolved = route_condition(&k, "missing", "ResolvedRefs").await;
    assert_eq!(
        (resolved["status"].as_str(), resolved["reason"].as_str()),
        (Some("False"), Some("BackendNotFound")),
        "{resolved}"
    );
    // What is not supported yet says so, and is not served.
    create::<HttpRoute>(&k, route("filtered", json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/filtered"}}],
         "filters": [{"type": "ExtensionRef", "extensionRef": {"group": "example.io", "kind": "Thing", "name": "x"}}],
         "backendRefs": [{"name": "app", "port": 80}]}
    ])))
    .await;
    let accepted = route_condition(&k, "filtered", "Accepted").await;
    assert_eq!(
        (accepted["status"].as_str(), accepted["reason"].as_str()),
        (Some("False"), Some("UnsupportedValue")),
        "{accepted}"
    );
    assert_eq!(
        send(&c, "GET", &gw.url("/filtered"), &[], "").await.status,
        404
    );
    // A RequestRedirect filter answers the redirect itself (302 unless said).
    create::<HttpRoute>(&k, route("moved", json!([
        {"matches": [{"path": {"type": "Exact", "value": "/old"}}],
         "filters": [{"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "path": {"type": "ReplaceFullPath", "replaceFullPath": "/new"}}}]}
    ])))
    .await;
    let moved = until_status(&c, &gw, "/old", 302).await;
    let location = moved.headers["location"].to_str().unwrap();
    assert!(
        location.starts_with("https://") && location.ends_with("/new"),
        "{location}"
    );
    // Header modifier filters change the request and the response.
    create::<HttpRoute>(&k, route("headers", json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/headers"}}],
         "filters": [
            {"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "X-Env", "value": "prod"}], "remove": ["x-secret"]}},
            {"type": "ResponseHeaderModifier", "responseHeaderModifier": {"add": [{"name": "x-served-by", "value": "wasmgate"}]}}],
         "backendRefs": [{"name": "app", "port": 80}]}
    ])))
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let edited = loop {
        let reply = send(&c, "GET", &gw.url("/headers"), &[("x-secret", "1")], "").await;
        if reply.status == 200 {
            break reply;
        }
        assert!(Instant::now() < deadline, "/headers never served");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(edited.headers["x-served-by"], "wasmgate");
    let seen = a.received("/headers").pop().unwrap();
    assert_eq!(
        (seen["x-env"].to_str().unwrap(), seen.get("x-secret")),
        ("prod", None)
    );
    // RequestMirror sends a copy to another Service.
    create::<HttpRoute>(&k, route("mirrored", json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/mirrored"}}],
         "filters": [{"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "beta", "port": 80}}}],
         "backendRefs": [{"name": "app", "port": 80}]}
    ])))
    .await;
    let mirrored = until_status(&c, &gw, "/mirrored", 200).await;
    assert_eq!(mirrored.json()["upstream"], "a");
    until("the copy reaches the mirror", || async {
        !b.received("/mirrored").is_empty()
    })
    .await;
    // URLRewrite replaces the matched prefix and the host; a query
    // parameter match takes only the requests that carry it.
    create::<HttpRoute>(
        &k,
        route(
            "rewritten",
            json!([
                {"matches": [{"path": {"type": "PathPrefix", "value": "/shop"},
                              "queryParams": [{"name": "tier", "value": "gold"}]}],
                 "filters": [{"type": "URLRewrite", "urlRewrite": {"hostname": "internal.example",
                    "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/store"}}}],
                 "backendRefs": [{"name": "app", "port": 80}]}
            ]),
        ),
    )
    .await;
    let rewritten = until_status(&c, &gw, "/shop/items?tier=gold", 200).await;
    let echo = rewritten.json();
    assert_eq!(echo["path"], "/store/items?tier=gold", "{echo}");
    assert_eq!(echo["headers"]["host"], "internal.example", "{echo}");
    assert_eq!(
        send(&c, "GET", &gw.url("/shop/items?tier=silver"), &[], "")
            .await
            .status,
        404
    );
    // The admin API does not write here: the resources are the truth.
    let put = send(
        &c,
        "PUT",
        &gw.admin_url("/routes/x"),
        &[("x-wasmgate-admin", "1")],
        r#"{"respond": {"status": 200}}"#,
    )
    .await;
    assert!(put.status >= 400, "{}", put.text());
    assert!(put.text().contains("kubectl"), "{}", put.text());

    // A deleted route goes away.
    let routes: Api<HttpRoute> = Api::default_namespaced(k.clone());
    routes
        .delete("missing", &DeleteParams::default())
        .await
        .unwrap();
    until_status(&c, &gw, "/missing", 404).await;

    // The API server killed under load: the node keeps serving what it has.
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let load = {
        let (c, url, answered) = (c.clone(), gw.url("/app/x"), answered.clone());
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            for _ in 0..300 {
                statuses.push(send(&c, "GET", &url, &[], "").await.status);
                answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            statuses
        })
    };
    // Killed with the load under way.
    while answered.load(std::sync::atomic::Ordering::Relaxed) < 20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cluster.api.kill();
    let statuses = load.await.unwrap();
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(
        send(&c, "GET", &gw.url("/split"), &[], "").await.status,
        200
    );
    // Meanwhile /status and /cluster say which watches are failing, and why.
    let watches = |view: Value| view["watches"].as_object().cloned().unwrap_or_default();
    until("the watches say the API server is gone", || async {
        let view = admin(&c, &gw, "GET", "/cluster", "").await.json();
        let failing = watches(view.clone())
            .values()
            .filter(|w| w["state"] == "retrying" && w["last_error"].is_string())
            .count();
        failing > 0 && view["unhealthy_watches"].as_u64() == Some(failing as u64)
    })
    .await;
    let status = admin(&c, &gw, "GET", "/status", "").await.json();
    let http_routes = &status["config"]["kubernetes"]["watches"]["HTTPRoute"];
    assert!(http_routes["errors"].as_u64() >= Some(1), "{status}");

    // The API server back: its new watch cache no longer has the watches'
    // resource versions (410 Expired). They list again at once, and a new
    // route serves within seconds (it took 30-87 s while a 410 waited out
    // a backoff of up to 30 s).
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.api.start_again();
    let back = Instant::now();
    create::<HttpRoute>(&k, route("after", json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/after"}}], "backendRefs": [{"name": "app", "port": 80}]}
    ])))
    .await;
    until_status(&c, &gw, "/after", 200).await;
    assert!(
        back.elapsed() < Duration::from_secs(15),
        "a new route served {:?} after the API server came back",
        back.elapsed()
    );
    until("every watch is watching again", || async {
        let view = admin(&c, &gw, "GET", "/cluster", "").await.json();
        view["unhealthy_watches"] == 0 && watches(view).values().all(|w| w["state"] == "watching")
    })
    .await;
    let view = admin(&c, &gw, "GET", "/cluster", "").await.json();
    let relisted = watches(view.clone())
        .values()
        .map(|w| w["relists"].as_u64().unwrap())
        .sum::<u64>();
    assert!(relisted > 0, "no watch re-listed after 410: {view}");
}

/// The value of response header `name`, or "".
fn header(reply: &crate::common::Reply, name: &str) -> String {
    (reply.headers.get(name))
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

async fn get_host(
    c: &HttpClient,
    gw: &GatewayProc,
    path: &str,
    host: &str,
) -> crate::common::Reply {
    send(c, "GET", &gw.url(path), &[("host", host)], "").await
}

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
    while header(&get_host(&c, &first, "/shop", "x").await, "x-rule-tag") != "default" {
        assert!(
            Instant::now() < deadline,
            "the WasmPlugin never ran on /shop"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let orders = get_host(&c, &first, "/orders/1", "x").await;
    assert_eq!(
        (orders.status, header(&orders, "x-rule-tag")),
        (200, "orders-route".into())
    );
    // The count is per host, in Redis: the filter reached it.
    let count: u32 = header(&orders, "x-rule-count").parse().unwrap_or(0);
    assert!(count >= 1, "{:?}", orders.headers);
    let api = get_host(&c, &first, "/shop", "api.example.com").await;
    assert_eq!(header(&api, "x-rule-tag"), "api-domain");
    let quiet = get_host(&c, &first, "/shop", "quiet.example.com").await;
    assert_eq!(
        (quiet.status, header(&quiet, "x-rule-tag")),
        (200, String::new())
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
        (orders.status, header(&orders, "x-rule-tag")),
        (200, "orders-route".into())
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
    while header(&reply, "x-rule-tag") != "api-domain" {
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

/// The documented install: deploy/kubernetes/*.yaml are accepted by the API
/// server as they are, the node file in the Deployment's Secret passes
/// `wasmgate check`, and a node with exactly rbac.yaml's rights (a token of
/// its ServiceAccount) serves routes, writes their status and holds its
/// Lease, and may change nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_the_documented_rbac_serves_and_writes_status() {
    use crate::common::tls::curl;
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    use kube::api::PostParams;
    use wasmgate_testkit::pki::{KeyType, Pki};

    let cluster = Cluster::start().await;
    let k = cluster.k.clone();
    create_from_file(&k, "deploy/kubernetes/rbac.yaml").await;
    create_from_file(&k, "deploy/kubernetes/deployment.yaml").await;
    let secrets: Api<Secret> = Api::namespaced(k.clone(), "wasmgate-system");
    let data = secrets.get("wasmgate").await.unwrap().data.unwrap();
    let node_file = cluster.dir.path().join("from-secret.yaml");
    std::fs::write(&node_file, &data["wasmgate.yaml"].0).unwrap();
    // As the pod runs it: no admin token anywhere, the admin API on the
    // pod's loopback, the probes on a listener of their own.
    assert!(!data.contains_key("admin-token"));
    let check = crate::common::wasmgate()
        .args(["check", "-c"])
        .arg(&node_file)
        .env_remove("WASMGATE_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let node: serde_json::Value = serde_yaml_ng::from_slice(&data["wasmgate.yaml"].0).unwrap();
    let admin_address: std::net::SocketAddr = node["admin"].as_str().unwrap().parse().unwrap();
    assert!(admin_address.ip().is_loopback(), "{node}");
    {
        use k8s_openapi::api::apps::v1::Deployment;
        let deployments: Api<Deployment> = Api::namespaced(k.clone(), "wasmgate-system");
        let pod = deployments
            .get("wasmgate")
            .await
            .unwrap()
            .spec
            .unwrap()
            .template
            .spec
            .unwrap();
        let context = pod.security_context.unwrap();
        assert_eq!(context.run_as_non_root, Some(true));
        let container = &pod.containers[0];
        let own = container.security_context.clone().unwrap();
        assert_eq!(own.read_only_root_filesystem, Some(true));
        assert_eq!(own.allow_privilege_escalation, Some(false));
        let probe = container.readiness_probe.clone().unwrap().http_get.unwrap();
        assert_eq!(probe.path.as_deref(), Some("/readyz"));
        let ports: Vec<i32> = container
            .ports
            .clone()
            .unwrap()
            .iter()
            .map(|p| p.container_port)
            .collect();
        assert!(
            !ports.contains(&admin_address.port().into()),
            "the admin port is not the pod's: {ports:?}"
        );
    }

    let accounts: Api<ServiceAccount> = Api::namespaced(k.clone(), "wasmgate-system");
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = accounts
        .create_token_request("wasmgate", &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let kubeconfig = cluster
        .api
        .kubeconfig_as(cluster.dir.path(), "wasmgate-sa", &token);
    let app = Upstream::start_on("app", &interface_ip()).await;
    service(&k, "app", &[&app]).await;
    create::<HttpRoute>(&k, route("app", json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/app"}}], "backendRefs": [{"name": "app", "port": 80}]}
    ])))
    .await;
    // Secrets are read by name: the Role grants `example-tls`, not
    // `other-tls`, though an HTTPS listener names each.
    let ca = Pki::new("rbac-ca");
    for (name, host) in [
        ("example-tls", "shop.example.com"),
        ("other-tls", "api.example.com"),
    ] {
        let issued = ca.server(&[host], KeyType::EcdsaP256, 1, 1);
        create::<Secret>(&k, tls_secret(name, &issued)).await;
    }
    secure_gateway(&k, "example-tls", "other-tls").await;
    let tls_port = crate::common::free_port();
    let gw = cluster.node_as(
        &kubeconfig,
        ", lease_namespace: wasmgate-system",
        &format!("listeners: [{{address: \"127.0.0.1:{tls_port}\", tls: {{}}}}]\n"),
    );
    let c = client();
    until_status(&c, &gw, "/app", 200).await;
    until("the granted Secret serves", || async {
        curl("shop.example.com", tls_port, "/", &ca.ca, &[]).status == 200
    })
    .await;
    until("the Secret the node may not read is said", || async {
        let condition = listener_condition(&k, "secure", "api", "ResolvedRefs").await;
        condition.is_some_and(|c| {
            c["status"] == "False"
                && c["message"].as_str().unwrap_or_default().contains(
                    "Secret `default/other-tls` cannot be read: the node may not read it (RBAC",
                )
        })
    })
    .await;
    let status = crate::common::gateway::admin(&c, &gw, "GET", "/status", "")
        .await
        .json();
    let unreadable = &status["config"]["kubernetes"]["secrets"]["unreadable"];
    assert!(unreadable.get("default/other-tls").is_some(), "{status}");
    assert!(unreadable.get("default/example-tls").is_none(), "{status}");
    assert_eq!(
        route_condition(&k, "app", "Accepted").await["status"],
        "True"
    );
    let leases: Api<Lease> = Api::namespaced(k.clone(), "wasmgate-system");
    let lease = leases
        .get("wasmgate-wasmgate-io-gateway-controller")
        .await
        .unwrap();
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(!holder.is_empty(), "the node holds the Lease");
    let logs = gw.logs();
    let refused: Vec<&str> = (logs.lines())
        .filter(|l| l.contains("forbidden") && !l.contains("other-tls"))
        .collect();
    assert!(
        refused.is_empty(),
        "the node was refused something: {refused:?}"
    );
    // The ServiceAccount reads and writes status; it changes no spec; it
    // reads the Secret it was granted and no other, nor lists any.
    let as_node = crate::common::kube::client_from(&kubeconfig).await;
    let node_secrets: Api<Secret> = Api::default_namespaced(as_node.clone());
    assert!(node_secrets.get("example-tls").await.is_ok());
    assert!(node_secrets.get("other-tls").await.is_err());
    assert!(node_secrets.list(&Default::default()).await.is_err());
    let everywhere: Api<Secret> = Api::all(as_node.clone());
    assert!(everywhere.list(&Default::default()).await.is_err());
    let routes: Api<HttpRoute> = Api::default_namespaced(as_node);
    let refused = routes.delete("app", &DeleteParams::default()).await;
    assert!(
        refused.is_err(),
        "the node's ServiceAccount may delete routes"
    );
}

/// HTTPS listeners take their certificates from TLS Secrets, chosen by
/// SNI, and follow them (a Secret created later or rotated serves new
/// handshakes); a route attached only to HTTPS listeners is not served in
/// plain HTTP; a listener whose Secret is missing says so. A GRPCRoute
/// sends every kind of gRPC call to its Service over h2c, its header
/// modifier reaching the server as metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_listeners_use_tls_secrets_and_grpc_routes_reach_grpc_services() {
    use crate::common::peers::{client as peer_client, Peer};
    use crate::common::tls::curl;
    use gateway_api::grpcroutes::GrpcRoute;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Patch, PatchParams};
    use wasmgate_testkit::pki::{KeyType, Pki};

    let cluster = Cluster::start().await;
    let k = cluster.k.clone();
    let ip = interface_ip();
    let app = Upstream::start_on("app", &ip).await;
    service(&k, "app", &[&app]).await;
    let first_ca = Pki::new("first-ca");
    let shop = first_ca.server(&["shop.example.com"], KeyType::EcdsaP256, 1, 1);
    create::<Secret>(&k, tls_secret("shop-tls", &shop)).await;
    secure_gateway(&k, "shop-tls", "api-tls").await;
    let tls_port = crate::common::free_port();
    let gw = cluster.node(&format!(
        "listeners: [{{address: \"127.0.0.1:{tls_port}\", tls: {{}}}}]\n"
    ));
    let c = client();

    // Served over HTTPS with the Secret's certificate, HTTP/2 by ALPN; not
    // in plain HTTP, which no listener of the route's Gateway speaks.
    let deadline = Instant::now() + Duration::from_secs(30);
    let got = loop {
        let got = curl("shop.example.com", tls_port, "/x", &first_ca.ca, &[]);
        if got.status == 200 || Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        (got.status, got.version.as_str()),
        (200, "2"),
        "{}",
        got.stderr
    );
    assert!(got.body.contains("\"upstream\":\"app\""), "{}", got.body);
    let plain = get_host(&c, &gw, "/x", "shop.example.com").await;
    assert_eq!(plain.status, 404, "{}", plain.text());

    // The listener whose Secret does not exist says so; the Secret created,
    // it serves.
    let listener_condition = |name: &'static str, kind: &'static str| {
        let k = k.clone();
        async move {
            let c = listener_condition(&k, "secure", name, kind).await?;
            Some((
                c["status"].as_str()?.to_string(),
                c["reason"].as_str()?.to_string(),
            ))
        }
    };
    until("the missing Secret is said", || async {
        listener_condition("api", "ResolvedRefs").await
            == Some(("False".into(), "InvalidCertificateRef".into()))
    })
    .await;
    assert_eq!(
        listener_condition("shop", "Programmed").await,
        Some(("True".into(), "Programmed".into()))
    );
    let api_cert = first_ca.server(&["api.example.com"], KeyType::Rsa2048, 2, 1);
    create::<Secret>(&k, tls_secret("api-tls", &api_cert)).await;
    until("the new Secret serves", || async {
        curl("api.example.com", tls_port, "/", &first_ca.ca, &[]).status == 200
    })
    .await;
    assert_eq!(
        listener_condition("api", "ResolvedRefs").await,
        Some(("True".into(), "ResolvedRefs".into()))
    );

    // A rotated Secret (another CA's certificate) serves new handshakes.
    let second_ca = Pki::new("second-ca");
    let rotated = second_ca.server(&["shop.example.com"], KeyType::EcdsaP256, 3, 1);
    let secrets: Api<Secret> = Api::default_namespaced(k.clone());
    let patch =
        json!({"stringData": {"tls.crt": rotated.cert_pem(), "tls.key": rotated.key_pem()}});
    secrets
        .patch("shop-tls", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    until("the rotated certificate is served", || async {
        curl("shop.example.com", tls_port, "/", &second_ca.ca, &[]).status == 200
    })
    .await;

    // A listener that takes routes from namespaces by label; the route in
    // such a namespace reaches a Service of `default` once a ReferenceGrant
    // there allows it.
    {
        use gateway_api::referencegrants::ReferenceGrant;
        use k8s_openapi::api::core::v1::Namespace;
        use kube::api::PostParams;
        let namespaces: Api<Namespace> = Api::all(k.clone());
        let team: Namespace = serde_json::from_value(
            json!({"metadata": {"name": "team-a", "labels": {"team": "a"}}}),
        )
        .unwrap();
        namespaces
            .create(&PostParams::default(), &team)
            .await
            .unwrap();
        create::<Gateway>(&k, json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "shared"},
            "spec": {"gatewayClassName": "wasmgate", "listeners": [
                {"name": "teams", "port": 80, "protocol": "HTTP", "hostname": "teams.example.com",
                 "allowedRoutes": {"namespaces": {"from": "Selector",
                     "selector": {"matchLabels": {"team": "a"}}}}}]}
        }))
        .await;
        let team_routes: Api<HttpRoute> = Api::namespaced(k.clone(), "team-a");
        let team_route: HttpRoute = serde_json::from_value(json!({
            "metadata": {"name": "team-app"},
            "spec": {"parentRefs": [{"name": "shared", "namespace": "default"}],
                     "rules": [{"backendRefs": [{"name": "app", "namespace": "default", "port": 80}]}]}
        }))
        .unwrap();
        team_routes
            .create(&PostParams::default(), &team_route)
            .await
            .unwrap();
        let resolved = || async {
            let r = serde_json::to_value(team_routes.get("team-app").await.unwrap()).unwrap();
            let conditions = r["status"]["parents"][0]["conditions"].clone();
            let find = |kind: &str| {
                (conditions.as_array().into_iter().flatten())
                    .find(|c| c["type"] == kind)
                    .map(|c| {
                        (
                            c["status"].as_str().unwrap().to_string(),
                            c["reason"].as_str().unwrap().to_string(),
                        )
                    })
            };
            (find("Accepted"), find("ResolvedRefs"))
        };
        until(
            "the team's route is accepted, its backend not permitted",
            || async {
                resolved().await
                    == (
                        Some(("True".into(), "Accepted".into())),
                        Some(("False".into(), "RefNotPermitted".into())),
                    )
            },
        )
        .await;
        create::<ReferenceGrant>(&k, json!({
            "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
            "metadata": {"name": "team-a-to-app"},
            "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "team-a"}],
                     "to": [{"group": "", "kind": "Service", "name": "app"}]}
        }))
        .await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while get_host(&c, &gw, "/t", "teams.example.com").await.status != 200 {
            assert!(
                Instant::now() < deadline,
                "the granted route was never served"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    // A GRPCRoute on the plain listener of `edge`, to a gRPC server.
    let echo = Peer::serve_on("grpc_peer.py", &ip, &[]);
    crate::common::kube::service_at(&k, "echo", &[echo.address()], None).await;
    create::<GrpcRoute>(&k, json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GRPCRoute",
        "metadata": {"name": "echo"},
        "spec": {"parentRefs": [{"name": "edge"}], "hostnames": ["grpc.example.com"], "rules": [
            {"matches": [{"method": {"service": "test.Echo"}}],
             "filters": [{"type": "RequestHeaderModifier",
                          "requestHeaderModifier": {"set": [{"name": "x-via", "value": "wasmgate"}]}}],
             "backendRefs": [{"name": "echo", "port": 80}]}]}
    }))
    .await;
    let grpc = |scenario: &'static str| {
        let target = format!("127.0.0.1:{}", gw.port);
        peer_client(
            "grpc_peer.py",
            vec![target, scenario.into(), "authority=grpc.example.com".into()],
        )
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while grpc("status").await.report["code"] != "OK" {
        assert!(Instant::now() < deadline, "the GRPCRoute was never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let run = grpc("all").await;
    assert!(run.ok, "{}", run.report);
    assert_eq!(
        run.report["metadata_seen"]["x-via"], "wasmgate",
        "{}",
        run.report
    );
    let routes: Api<GrpcRoute> = Api::default_namespaced(k.clone());
    until("the GRPCRoute's status is written", || async {
        let r = serde_json::to_value(routes.get("echo").await.unwrap()).unwrap();
        (r["status"]["parents"][0]["conditions"].as_array()).is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Accepted" && c["status"] == "True")
        })
    })
    .await;
    // A gRPC call no route takes gets a gRPC status, not an HTTP error.
    let target = format!("127.0.0.1:{}", gw.port);
    let run = peer_client(
        "grpc_peer.py",
        vec![
            target,
            "status".into(),
            "authority=nowhere.example.com".into(),
        ],
    )
    .await;
    assert_eq!(run.report["code"], "NOT_FOUND", "{}", run.report);
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
            header(&preflight, "access-control-allow-methods")
        ),
        (204, "PUT".to_string())
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
        (public.status, header(&public, "x-seen-path")),
        (200, String::new())
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
        || async { header(&get(web, "/filtered/x").await, "x-seen-path") == "/filtered/x" },
    )
    .await;
    let public = get(web, "/public").await;
    assert_eq!(
        (public.status, header(&public, "x-seen-path")),
        (200, String::new()),
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

/// A BackendTLSPolicy makes the node speak TLS to a Service's endpoints,
/// verified with the CA of a ConfigMap for the policy's `hostname`; a
/// second policy on the same Service is `Conflicted`; a policy whose CA
/// ConfigMap is missing fails its route with 500 (never plain text) and
/// says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policies_reach_services_over_tls() {
    use gateway_api::backendtlspolicies::BackendTlsPolicy;
    use k8s_openapi::api::core::v1::ConfigMap;
    use wasmgate_testkit::pki::{KeyType, Pki};

    let cluster = Cluster::start().await;
    let k = cluster.k.clone();
    let ip = interface_ip();
    let pki = Pki::new("backend CA");
    let issued = pki.server(&["app.internal"], KeyType::EcdsaP256, 3, 1);
    let secure = Upstream::start_tls_on("secure", &ip, &issued.cert, &issued.key, None).await;
    let other = Upstream::start_tls_on("other", &ip, &issued.cert, &issued.key, None).await;
    service(&k, "secure", &[&secure]).await;
    service(&k, "other", &[&other]).await;
    create::<ConfigMap>(
        &k,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "backend-ca"},
               "data": {"ca.crt": std::fs::read_to_string(&pki.ca).unwrap()}}),
    )
    .await;
    let policy = |name: &str, service: &str, config_map: &str| {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy",
               "metadata": {"name": name},
               "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": service}],
                        "validation": {"hostname": "app.internal",
                                       "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": config_map}]}}})
    };
    create::<BackendTlsPolicy>(&k, policy("secure-tls", "secure", "backend-ca")).await;
    tokio::time::sleep(Duration::from_millis(1100)).await; // a later creation time
    create::<BackendTlsPolicy>(&k, policy("secure-late", "secure", "backend-ca")).await;
    create::<BackendTlsPolicy>(&k, policy("other-tls", "other", "no-such-ca")).await;
    for name in ["secure", "other"] {
        create::<HttpRoute>(
            &k,
            route(
                name,
                json!([
                    {"matches": [{"path": {"type": "PathPrefix", "value": format!("/{name}")}}],
                     "backendRefs": [{"name": name, "port": 80}]}
                ]),
            ),
        )
        .await;
    }
    let gw = cluster.node("");
    let c = client();
    let reply = until_status(&c, &gw, "/secure/x", 200).await;
    assert_eq!(reply.json()["upstream"], "secure", "{}", reply.text());
    // Why (the missing CA) is the namespace owner's, in the policy's status
    // below; the client learns only that the route cannot be served.
    let failing = until_status(&c, &gw, "/other/x", 500).await;
    assert!(
        failing.text().contains("cannot be served") && !failing.text().contains("no-such-ca"),
        "{}",
        failing.text()
    );
    assert_eq!(other.hits(), 0, "never in plain text");

    let policies: Api<BackendTlsPolicy> = Api::default_namespaced(k.clone());
    let ancestor = |name: &'static str| {
        let policies = policies.clone();
        async move {
            let p = serde_json::to_value(policies.get(name).await.unwrap()).unwrap();
            let a = p["status"]["ancestors"][0].clone();
            let reason = |kind: &str| {
                (a["conditions"].as_array().into_iter().flatten())
                    .find(|c| c["type"] == kind)
                    .map(|c| c["reason"].as_str().unwrap_or_default().to_string())
                    .unwrap_or_default()
            };
            (
                a["ancestorRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                reason("Accepted"),
                reason("ResolvedRefs"),
            )
        }
    };
    let wanted = [
        ("secure-tls", "Accepted", "ResolvedRefs"),
        ("secure-late", "Conflicted", "ResolvedRefs"),
        (
            "other-tls",
            "NoValidCACertificate",
            "InvalidCACertificateRef",
        ),
    ];
    for (name, accepted, resolved) in wanted {
        until(
            "the policy's status names the Gateway and says how it stands",
            || async {
                ancestor(name).await
                    == (
                        "edge".to_string(),
                        accepted.to_string(),
                        resolved.to_string(),
                    )
            },
        )
        .await;
    }
}

/// Services from a ConfigMap (`kubernetes.services`), each password from
/// a Secret: a WasmPlugin reaches a password-protected Redis through them,
/// and a rotated Secret reaches the node without a reload (the old
/// password refused, connections dropped: counting goes on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_come_from_a_config_map_with_passwords_from_secrets() {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::{Patch, PatchParams};
    use wasmgate_testkit::RedisOptions;

    let cluster = Cluster::start().await;
    let k = cluster.k.clone();
    let mut redis = RedisServer::start_with(RedisOptions {
        password: Some("first-pass".into()),
        ..RedisOptions::default()
    });
    let app = Upstream::start_on("app", &interface_ip()).await;
    service(&k, "app", &[&app]).await;
    create::<HttpRoute>(&k, route("counted", json!([
        {"matches": [{"path": {"type": "PathPrefix", "value": "/counted"}}], "backendRefs": [{"name": "app", "port": 80}]}
    ])))
    .await;
    let list = format!(
        "- {{name: redis, redis: \"redis://127.0.0.1:{}/0\", password_secret: {{name: redis-auth, key: password}}}}\n",
        redis.port()
    );
    create::<ConfigMap>(
        &k,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "wasmgate-services"},
               "data": {"services.yaml": list}}),
    )
    .await;
    let secret = |password: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "redis-auth"},
               "type": "Opaque", "stringData": {"password": password}})
    };
    create::<Secret>(&k, secret("first-pass")).await;
    create::<WasmPlugin>(&k, json!({
        "apiVersion": "wasmgate.io/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": "rules"},
        "spec": {"url": format!("file://{}", crate::common::plugin("higress_rules_counter").display()),
                 "services": ["redis"],
                 "defaultConfig": {"redis": {"service_name": "redis.dns"}, "tag": "from-config-map"}}
    }))
    .await;
    let gw = cluster.node_as(
        &cluster.dir.path().join("kubeconfig"),
        ", services: default/wasmgate-services",
        "",
    );
    let c = client();
    let count = || async {
        let reply = get_host(&c, &gw, "/counted", "x").await;
        header(&reply, "x-rule-count").parse::<u32>().unwrap_or(0)
    };
    until(
        "the plugin counts in Redis with the Secret's password",
        || async { count().await >= 1 },
    )
    .await;
    assert!(
        !gw.logs().contains("first-pass"),
        "the password is never logged"
    );

    // Rotation: Redis takes only the new password and drops every
    // connection; the Secret changes; the node follows with no reload.
    redis.change_password("second-pass");
    let secrets: Api<Secret> = Api::default_namespaced(k.clone());
    secrets
        .patch(
            "redis-auth",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "second-pass"}})),
        )
        .await
        .unwrap();
    redis.command(&["CLIENT", "KILL", "TYPE", "normal"]);
    let before = count().await;
    until("counting goes on with the rotated password", || async {
        count().await > before
    })
    .await;
    assert!(!gw.logs().contains("second-pass"), "nor the new one");
}

/// Tenants: each namespace's WasmPlugins use only the services and module
/// directories the node's file grants that namespace, and the node's
/// default registry credentials reach only the registries they name: a
/// WasmPlugin naming a registry of its own gets none (the registry records
/// every request's headers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_gets_only_what_the_node_file_grants_it() {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::PostParams;
    use wasmgate_testkit::pki::{KeyType, Pki};

    let cluster = Cluster::start().await;
    let k = cluster.k.clone();
    let namespaces: Api<Namespace> = Api::all(k.clone());
    for name in ["team-a", "team-b"] {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    let pki = Pki::new("wasmgate test CA");
    let cert = pki.server(&["IP:127.0.0.1"], KeyType::EcdsaP256, 1, 1);
    let recorder = Upstream::start_tls("recorder", &cert.cert, &cert.key, None).await;
    let redis = RedisServer::start();
    let source = format!(
        r#", grants: {{"team-a": {a}, "team-b": {b}}}, registry: {{hosts: ["registry.internal:5000"], username: node, password: node-secret, ca_file: "{ca}"}}"#,
        a = plugin_grant(&["redis"]),
        b = plugin_grant(&[]),
        ca = pki.ca.display(),
    );
    let services = format!(
        "services:\n  - {{name: redis, redis: \"{}\"}}\n",
        redis.url()
    );
    let gw = cluster.node_as(&cluster.dir.path().join("kubeconfig"), &source, &services);
    let module = format!(
        "file://{}",
        crate::common::plugin("higress_rules_counter").display()
    );
    let plugin = |namespace: &str, name: &str, spec: serde_json::Value| {
        let k = k.clone();
        let (namespace, name) = (namespace.to_string(), name.to_string());
        async move {
            let api: Api<WasmPlugin> = Api::namespaced(k, &namespace);
            let object: WasmPlugin = serde_json::from_value(json!({
                "apiVersion": "wasmgate.io/v1alpha1", "kind": "WasmPlugin",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec
            }))
            .unwrap();
            api.create(&PostParams::default(), &object).await.unwrap();
        }
    };
    plugin(
        "team-a",
        "cache",
        json!({"url": module, "services": ["redis"]}),
    )
    .await;
    plugin(
        "team-b",
        "cache",
        json!({"url": module, "services": ["redis"]}),
    )
    .await;
    plugin(
        "team-b",
        "reader",
        json!({"url": "file:///etc/wasmgate/other-tenant.wasm"}),
    )
    .await;
    plugin(
        "team-b",
        "pulled",
        json!({"url": format!("oci://127.0.0.1:{}/team-b/plugin:1", recorder.port)}),
    )
    .await;
    let condition = |namespace: &'static str, name: &'static str| {
        let k = k.clone();
        async move {
            let api: Api<WasmPlugin> = Api::namespaced(k, namespace);
            let p = serde_json::to_value(api.get(name).await.unwrap()).unwrap();
            p["status"]["conditions"][0].clone()
        }
    };
    until("team-a's plugin is accepted", || async {
        condition("team-a", "cache").await["status"] == "True"
    })
    .await;
    until("team-b's are refused with the reason", || async {
        let cache = condition("team-b", "cache").await;
        let reader = condition("team-b", "reader").await;
        cache["status"] == "False"
            && cache["message"]
                .as_str()
                .is_some_and(|m| m.contains("service `redis` is not granted to namespace `team-b`"))
            && reader["status"] == "False"
            && reader["message"]
                .as_str()
                .is_some_and(|m| m.contains("not under a granted directory"))
    })
    .await;
    // The pull went to the tenant's registry, and no credentials with it.
    until("the tenant's registry was asked", || async {
        recorder.hits() > 0
    })
    .await;
    for (path, headers) in recorder.received_all() {
        assert!(
            headers.get("authorization").is_none(),
            "{path}: {headers:?}"
        );
    }
    assert!(!gw.logs().contains("node-secret"));
}
